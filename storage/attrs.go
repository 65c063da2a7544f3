package storage

// Attribute keys of sgtune's trials and studies, in one place: storage
// writes some of them itself (RequeueTrial, FailTrial, ReapStale) and the
// search package writes and decodes the others. Each says whether it is a
// user or a system attribute (goptuna keeps them apart), and keys never
// change once databases hold them.
const (
	// AttrState (user): sgtune's finer trial state ("complete", "failed",
	// "infeasible", "interrupted", "duplicate"...); goptuna's is coarser.
	AttrState = "sgtune.state"
	// AttrClass (user): the failure class of a trial that did not pass.
	AttrClass = "sgtune.failure_class"
	// AttrReason (user): why a trial failed, was skipped or was retried.
	AttrReason = "sgtune.reason"
	// AttrExitCode (user): the server's exit code, when it exited.
	AttrExitCode = "sgtune.exit_code"
	// AttrLogTail (user): the last lines of the server's log.
	AttrLogTail = "sgtune.log_tail"
	// AttrLogExcerpt (user): the lines of the log that explain a failure.
	AttrLogExcerpt = "sgtune.log_excerpt"
	// AttrLogPath (user): where the server's full log was written.
	AttrLogPath = "sgtune.log_path"
	// AttrLogError (user): why the log at AttrLogPath lacks lines (a
	// write to it or its close failed); the trial's outcome stands.
	AttrLogError = "sgtune.log_error"
	// AttrConfig (user): the launched config as JSON (flags, env).
	AttrConfig = "sgtune.config"
	// AttrArgv (user): the server's command line as a JSON array.
	AttrArgv = "sgtune.argv"
	// AttrFacts (user): what the launcher learned at startup, as JSON.
	AttrFacts = "sgtune.facts"
	// AttrScore (user): the trial's score (a float in text).
	AttrScore = "sgtune.score"
	// AttrScoreOK (user): "true" when the score met the study's gates.
	AttrScoreOK = "sgtune.score_ok"
	// AttrScoreReason (user): why the score is what it is (gate, SLO).
	AttrScoreReason = "sgtune.score_reason"
	// AttrResult (user): the measurement result as JSON.
	AttrResult = "sgtune.result"
	// AttrGPUs (user): the GPUs the trial ran on ("0,1,2,3").
	AttrGPUs = "sgtune.gpus"
	// AttrLaunching (user): "1" once the trial passed its screening and
	// is about to launch (see search's sameConfigIn).
	AttrLaunching = "sgtune.launching"
	// AttrStopping (user): "1" while a trial stored before its server
	// stopped waits for that stop; "" once it stopped cleanly. A trial
	// left with it by a process that died may have left server
	// processes behind (see search's reapEnded).
	AttrStopping = "sgtune.stopping"
	// AttrOwner (system): the process that runs the trial ("host:pid").
	AttrOwner = "sgtune.owner"
	// AttrHost (system): the host the trial's server ran on.
	AttrHost = "sgtune.host"
	// AttrSlurmJob (system): the Slurm job ID that ran the trial, when a
	// Slurm launcher ran it.
	AttrSlurmJob = "sgtune.slurm_job"
	// AttrRetryOf (system): on a retry, the original trial's number.
	AttrRetryOf = "sgtune.retry_of"
	// AttrConfirmOf (system): on a confirmation run (a top config measured
	// again before the winner is declared), the original trial's number.
	AttrConfirmOf = "sgtune.confirm_of"
	// AttrBaseline (system): on the engine's default config's trial (the
	// study's baseline), on its retries and on its confirmation runs:
	// JSON {"omitted": [param, ...]}, the params the config leaves to the
	// engine (none: its params are a point of the space).
	AttrBaseline = "sgtune.baseline"
	// AttrBaselineTrial (study system attr): the number of the trial that
	// took the study's baseline launch, so that it is launched once.
	AttrBaselineTrial = "sgtune.baseline_trial"
	// AttrFailedIn (user): the measurement phase a launched trial failed
	// in ("C64 r1", "warm-up C64", "quality before"); absent when it
	// failed before measuring.
	AttrFailedIn = "sgtune.failed_in"
	// AttrScoreSpec (study user attr): the study's score spec as JSON, so
	// reports and rescore read it without the study file.
	AttrScoreSpec = "sgtune.score_spec"
	// AttrBudgetTrials (study user attr): the launches the study may use.
	AttrBudgetTrials = "sgtune.budget_trials"
	// AttrFlagsSchema (study user attr): the path of the study's own flag
	// schema file, when it names one.
	AttrFlagsSchema = "sgtune.flags_schema"
	// AttrWinner (study system attr): the declared winner with its pooled
	// measurements and spread, as JSON.
	AttrWinner = "sgtune.winner"
	// AttrRetries (user): on a retry, how many retries preceded it.
	AttrRetries = "sgtune.retries"
	// AttrEngine (user): the engine command as a JSON array.
	AttrEngine = "sgtune.engine"
	// AttrEngineVersion (user): the engine's version.
	AttrEngineVersion = "sgtune.engine_version"
	// AttrLaunchCommand (user): the launch command prefix as a JSON array.
	AttrLaunchCommand = "sgtune.launch_command"
	// AttrContainer (user): for a trial run in a container, the runtime,
	// image, image ID run, registry digest and run options, as JSON.
	AttrContainer = "sgtune.container"
	// AttrConfigKey (user): the config's identity, for duplicate checks.
	AttrConfigKey = "sgtune.config_key"
	// AttrRejections (user): the space's rules that rejected the trial's
	// config before launch, as JSON.
	AttrRejections = "sgtune.rejections"
	// AttrDurationS (user): the trial's wall time in seconds.
	AttrDurationS = "sgtune.duration_s"
	// AttrEngineName (user): the engine's name (sglang, llamacpp, vllm).
	AttrEngineName = "sgtune.engine_name"
	// AttrModelRevision (user): the model revision the study names.
	AttrModelRevision = "sgtune.model_revision"
	// AttrPromptTokens (user): the mean prompt size per request the
	// server counted (chat template included).
	AttrPromptTokens = "sgtune.prompt_tokens"
	// AttrUID (study system attr): a random ID of the study, which tags
	// its servers' processes.
	AttrUID = "sgtune.uid"
	// AttrFingerprint (study system attr): per section of the study file
	// that decides what a measurement means, a hash of it (JSON; see
	// space.Study.Fingerprint), to refuse resuming from an edited file.
	AttrFingerprint = "sgtune.fingerprint"
	// AttrFixedParams (system) is goptuna's attribute holding the internal
	// params a WAITING trial must use (what Study.EnqueueTrial writes).
	AttrFixedParams = "fixed_params"
)

// StateInterrupted is the AttrState value of a trial reaped as stale (and
// of one interrupted by its own process).
const StateInterrupted = "interrupted"
