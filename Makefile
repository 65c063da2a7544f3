# sgtune: build, test and demo. `make demo` runs a real study against the
# bundled SGLang simulator; `make test` runs vet and every test (the
# packages with goroutines under the race detector).

GO ?= go
# Link the system SQLite when its headers are there (Debian: libsqlite3-dev):
# compiling mattn/go-sqlite3's bundled amalgamation costs ~50 s per cold build.
SQLITE_TAG := $(shell pkg-config --exists sqlite3 2>/dev/null && echo libsqlite3)
export GOFLAGS := $(if $(SQLITE_TAG),-tags=$(SQLITE_TAG)) -buildvcs=false
# The study files name their engines as commands on PATH (sglang-sim here).
export PATH := $(CURDIR)/bin:$(PATH)

.PHONY: all build test demo demo-cluster lint soak calibrate bench-loadgen bench-search clean report-check export-check llama-server test-containers traffic-check

all: build

# `sgtune --version` names the commit it was built from.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/...

# The packages that run goroutines are tested under the race detector; the
# rest run plainly, so that no package's tests run twice.
RACE_PKGS := ./launcher/... ./objective/... ./search/... ./sim/... ./storage/...

test: build
	$(GO) vet ./...
	$(GO) test -count=1 -race -timeout 15m $(RACE_PKGS)
	race=$$($(GO) list $(RACE_PKGS)) && \
		$(GO) test -count=1 -timeout 15m $$($(GO) list ./... | grep -vxF "$$race")

# A real study: launches sglang-sim through the launcher, measures it with the
# load generator, stores every trial in sgtune.db, then exports the winner.
demo: build
	bin/sgtune run testdata/studies/demo.yaml --storage sgtune.db
	bin/sgtune export --storage sgtune.db --format bash -o best-launch.sh
	bash -n best-launch.sh
	@echo "demo: trials in sgtune.db (sgtune status), winner in best-launch.sh"

# The demo study's report rendered in headless Chromium (Debian: chromium):
# fails on console errors, missing plots or network references; the
# screenshot lands in out/report/screenshot.png. Runs the demo if needed.
report-check: build
	@test -f sgtune.db || $(MAKE) demo
	bin/sgtune report --storage sgtune.db -o out/report
	scripts/report-check.sh out/report out/report/screenshot.png

# The demo winner's bash and docker scripts through bash -n and shellcheck
# (Debian: shellcheck), every severity.
export-check: build
	@test -f sgtune.db || $(MAKE) demo
	mkdir -p out
	bin/sgtune export --storage sgtune.db --format bash -o out/best-launch.sh
	bin/sgtune export --storage sgtune.db --format docker -o out/best-launch-docker.sh
	bash -n out/best-launch.sh
	bash -n out/best-launch-docker.sh
	shellcheck --severity=style out/best-launch.sh out/best-launch-docker.sh scripts/report-check.sh

# Beyond one machine: four `sgtune worker` processes share one PostgreSQL
# study of 40 trials, each trial a Slurm job on a local two-node cluster
# with fake GPUs; one worker is killed with kill -9 mid-trial and its trial
# must be re-run by another. Starts and stops Slurm and PostgreSQL itself
# (as root: slurmd); the last line holds the figures read from the storage.
demo-cluster: build
	scripts/demo-cluster.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# 50 short trials with random faults and three kill -9s of the tuner.
soak:
	SGTUNE_LONG=1 $(GO) test -count=1 -timeout 20m -run TestSoak -v ./cmd/sgtune

# Simulator vs published seed figures, through sgtune's own load generator
# (about 10 minutes): the five passing seed-000 runs, the failing runs, the
# cold first repeat, the seed-004 matrix, and the virtual clock against the
# live simulator and the seed. --strict exits 1 on any miss.
calibrate: build
	$(GO) run ./cmd/calibrate --faults --cold --matrix --virtual

# Search quality without servers, on the landscape suite
# (testdata/landscapes/suite.yaml): every config of each study scored on
# the simulator's own engine in virtual time or replayed from a table
# measured for real (the landscapes, cached in ~/.cache/sgtune/bench-search
# and checked against this build before use), then 20 studies of up to 30
# launches per method and landscape: sgtune's own loop as `sgtune run` runs
# it (the default sampler with the study's parallelism, baseline and
# confirmation, every launch counted, the winner it declares scored), random and goptuna's TPE
# in a plain loop, with 12% noise per repeat. Judge a change with
# BENCH_SEARCH_FLAGS=--seeds=100 (add --runs=FILE to keep every search's
# result for a paired comparison of two builds). The last line is the summary:
# suite_landscapes=N ours_worst_trials_to_97=W ours_median_trials_to_97=M ours_worst_regret_at_30=R random_over_ours_min=X infeasible_launches=D
bench-search: build
	bin/bench-search --suite testdata/landscapes/suite.yaml $(BENCH_SEARCH_FLAGS)

# Client CPU per streamed chunk, sgtune's reader vs go-openai's Recv(), and
# the TTFT error against an injected delay at C128; last line is the summary.
bench-loadgen:
	$(GO) run ./cmd/bench-loadgen

# llama.cpp's llama-server (CPU) built from the source bundled in npm
# node-llama-cpp@3.21.1, plus a generated tiny GGUF model, cached in
# ${SGTUNE_CACHE:-$HOME/.cache/sgtune}/llama-3.21.1 (outside the repo; about
# 10 minutes the first time, instant after). Prints LLAMA_SERVER= and LLAMA_MODEL=.
llama-server:
	bash scripts/llama-build.sh

# sgtune against the real llama-server above: the study
# testdata/studies/llama-cpu.yaml (12 launched trials), the token check against
# the server's counter, a bad flag's classification time, the winner's export
# started for /health, the report's plateau line. A few minutes on 2 cores;
# outputs in out/test-llama. The last line is the summary:
# trials=N complete=M token_mismatches=K bad_command_detect_ms=X winner_within_spread=yes|no
.PHONY: test-llama
test-llama: build
	bash scripts/test-llama.sh

# Trials in containers against a real Docker daemon (Debian: docker.io; a
# private dockerd is started and stopped when none answers): the study
# testdata/studies/container-sim.yaml on a locally imported image of the
# simulator, two GPU groups side by side, `sgtune run` killed with kill -9
# mid-trial and run again; a missing image refused by check. About a
# minute; outputs in out/test-containers. The last line is the summary:
# containers_left=N max_on_one_group=M disjoint_devices=yes|no missing_image_exit=C
test-containers: build
	bash scripts/test-containers.sh

# Workloads shaped like real traffic, on the simulator (about 4 minutes):
# testdata/studies/rate-sim.yaml (the highest request rate within a TTFT
# p99 SLO, open-loop Poisson probes of ShareGPT-format requests) and its
# report's rate plots; the radix cache on and off on a shared 2,000-token
# system prompt and on unique prompts (prefix-sim.yaml); an open-loop level
# against a server stalled 2 s. Outputs in out/traffic-check. Last line:
# max_rate_winner=R radix_gain_shared=G1 radix_gain_unique=G2 stall_in_p99=yes|no
traffic-check: build
	bash scripts/traffic-check.sh

clean:
	rm -rf bin sgtune.db sgtune.db-* best-launch.sh sgtune-logs out
