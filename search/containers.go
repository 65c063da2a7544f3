package search

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/storage"
)

// containerSpec is the launcher's container for trial number on gpus, nil
// when the study runs its servers on the host. Its labels let the daemon
// list the study's containers and tell which process started each.
func (r *runner) containerSpec(number int, gpus []int) *launcher.Container {
	c := r.st.Engine.Container
	if c == nil {
		return nil
	}
	return &launcher.Container{Spec: *c, Name: r.jobName(number), Labels: map[string]string{
		container.LabelStudy: r.uid,
		container.LabelTrial: r.trialTag(number),
		container.LabelHost:  r.host,
		container.LabelOwner: r.owner,
		container.LabelGPUs:  gpuCSV(gpus),
	}}
}

// containerClient is the study's container runtime client, made on first
// use; nil for a study without engine.container.
func (r *runner) containerClient() (*container.Client, error) {
	c := r.st.Engine.Container
	if c == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.containers == nil {
		cl, err := container.NewClient(c.RuntimeName())
		if err != nil {
			return nil, err
		}
		r.containers = cl
	}
	return r.containers, nil
}

// recordContainer stores the image a trial's container will run: the ID
// the daemon resolves the study's image to as the trial launches (runs
// never pull, so the container runs that image), and the image's registry
// digest where it has one. Only the store's error is returned: an image
// the daemon cannot describe is left unrecorded and fails the launch.
func (r *runner) recordContainer(ctx context.Context, t *trialRun, spec *launcher.Container) error {
	cl, err := r.containerClient()
	if err != nil || cl == nil {
		return nil
	}
	run := container.Record{Runtime: cl.Name, Image: spec.Image, Options: spec.Options, Volumes: spec.Volumes, Name: spec.Name}
	if id, err := cl.ImageID(ctx, spec.Image); err == nil {
		run.ImageID = id
		run.RepoDigest = cl.RepoDigest(ctx, spec.Image)
	}
	b, err := json.Marshal(run)
	if err != nil {
		return err
	}
	return r.setAttrs(t, map[string]string{storage.AttrContainer: string(b)})
}

// sweepContainers removes the study's containers on this host whose
// owner process has ended (a tuner killed with -9 leaves its container
// running: the daemon, not the killed client, holds it), before anything
// launches on their GPUs. A live owner's containers are left to it.
func (r *runner) sweepContainers(ctx context.Context) error {
	cl, err := r.containerClient()
	if err != nil || cl == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	found, err := cl.List(ctx, map[string]string{container.LabelStudy: r.uid, container.LabelHost: r.host})
	if err != nil {
		return fmt.Errorf("list the study's containers: %w", err)
	}
	var dead []string
	for _, c := range found {
		if OwnerLive(c.Owner, r.host) == LiveNo {
			dead = append(dead, c.Name)
		}
	}
	if len(dead) == 0 {
		return nil
	}
	if err := cl.Remove(ctx, dead...); err != nil {
		return fmt.Errorf("remove containers left by ended processes: %w", err)
	}
	r.emit(Event{Kind: EventNote, Trial: -1, Text: fmt.Sprintf("removed %d container(s) left by ended sgtune processes: %v", len(dead), dead)})
	return nil
}

// removeTrialContainers removes the containers of trial number (its
// owner died): it reports how many, or an error when the daemon could
// not be asked.
func (r *runner) removeTrialContainers(number int) (int, error) {
	cl, err := r.containerClient()
	if err != nil || cl == nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	found, err := cl.List(ctx, map[string]string{container.LabelTrial: r.trialTag(number)})
	if err != nil {
		return 0, err
	}
	names := make([]string, len(found))
	for i, c := range found {
		names[i] = c.Name
	}
	return len(names), cl.Remove(ctx, names...)
}
