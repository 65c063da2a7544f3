package container

import (
	"slices"
	"strings"
	"testing"
)

func TestRunArgs(t *testing.T) {
	labels := map[string]string{LabelTrial: "SGTUNE_TRIAL=s/u/3", LabelGPUs: "4,5"}
	tests := []struct {
		name string
		spec Spec
		run  Run
		want string
	}{
		{"docker, no GPU runtime: no --gpus, host indices inside",
			Spec{Image: "img:1", Options: []string{"--ipc=host"}, Volumes: []string{"/m:/m:ro"}},
			Run{Name: "c3", Labels: labels, Env: []string{"SGTUNE_TRIAL=s/u/3", "HF_TOKEN=secret"}, GPUs: []int{4, 5}},
			"run --name c3 --network host --pull never --init --label io.sgtune.gpus=4,5 --label io.sgtune.trial=SGTUNE_TRIAL=s/u/3 " +
				"-e SGTUNE_TRIAL -e HF_TOKEN -e CUDA_DEVICE_ORDER -e CUDA_VISIBLE_DEVICES -v /m:/m:ro --ipc=host img:1 srv --flag 1"},
		{"docker with a GPU runtime: the group's devices",
			Spec{Runtime: "docker", Image: "img:1"},
			Run{Name: "c3", GPUs: []int{4, 5}, PassGPUs: true},
			`run --name c3 --network host --pull never --init --gpus "device=4,5" -e CUDA_DEVICE_ORDER -e CUDA_VISIBLE_DEVICES img:1 srv --flag 1`},
		{"podman: CDI devices",
			Spec{Runtime: "podman", Image: "img:1"},
			Run{Name: "c3", GPUs: []int{4, 5}, PassGPUs: true},
			"run --name c3 --network host --pull never --init --device nvidia.com/gpu=4 --device nvidia.com/gpu=5 -e CUDA_DEVICE_ORDER -e CUDA_VISIBLE_DEVICES img:1 srv --flag 1"},
		{"CPU trial: no GPU environment",
			Spec{Image: "img:1"},
			Run{Name: "c3"},
			"run --name c3 --network host --pull never --init img:1 srv --flag 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(tt.spec.RunArgs(tt.run, []string{"srv", "--flag", "1"}), " ")
			if got != tt.want {
				t.Errorf("RunArgs:\n got %s\nwant %s", got, tt.want)
			}
			if strings.Contains(got, "secret") {
				t.Errorf("an environment value is on the command line: %s", got)
			}
		})
	}
}

func TestInsideEnv(t *testing.T) {
	tests := []struct {
		run  Run
		want []string
	}{
		{Run{Env: []string{"A=1"}, GPUs: []int{4, 5}}, []string{"A=1", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=4,5"}},
		// Given only its group, the container numbers the devices from 0.
		{Run{GPUs: []int{4, 5}, PassGPUs: true}, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,1"}},
		{Run{Env: []string{"A=1"}}, []string{"A=1"}},
	}
	for _, tt := range tests {
		if got := InsideEnv(tt.run); !slices.Equal(got, tt.want) {
			t.Errorf("InsideEnv(%+v) = %v, want %v", tt.run, got, tt.want)
		}
	}
}

func TestReservedOption(t *testing.T) {
	tests := []struct {
		opts []string
		want string
	}{
		{[]string{"--ipc=host", "--shm-size", "32g", "-v", "/a:/b"}, ""},
		{[]string{"--ipc=host", "--gpus=all"}, "--gpus"},
		{[]string{"--gpus", "all"}, "--gpus"},
		{[]string{"--rm"}, "--rm"},
		{[]string{"--network=bridge"}, "--network"},
		{[]string{"--name", "x"}, "--name"},
		{[]string{"-d"}, "-d"},
	}
	for _, tt := range tests {
		if got := ReservedOption(tt.opts); got != tt.want {
			t.Errorf("ReservedOption(%v) = %q, want %q", tt.opts, got, tt.want)
		}
	}
}
