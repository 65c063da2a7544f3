# sgtune: build, test and demo. `make demo` runs a real study against the
# bundled SGLang simulator; `make test` runs vet and every test.

GO ?= go
# Link the system SQLite when its headers are there (Debian: libsqlite3-dev):
# compiling mattn/go-sqlite3's bundled amalgamation costs ~50 s per cold build.
SQLITE_TAG := $(shell pkg-config --exists sqlite3 2>/dev/null && echo libsqlite3)
export GOFLAGS := $(if $(SQLITE_TAG),-tags=$(SQLITE_TAG)) -buildvcs=false
# The study files name their engines as commands on PATH (sglang-sim here).
export PATH := $(CURDIR)/bin:$(PATH)

.PHONY: all build test demo demo-cluster lint soak calibrate bench-loadgen clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

test: build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 15m ./...

# A real study: launches sglang-sim through the launcher, measures it with the
# load generator, stores every trial in sgtune.db, then exports the winner.
demo: build
	bin/sgtune run testdata/studies/demo.yaml --storage sgtune.db
	bin/sgtune export --storage sgtune.db --format bash -o best-launch.sh
	bash -n best-launch.sh
	@echo "demo: trials in sgtune.db (sgtune status), winner in best-launch.sh"

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
# (about 5 minutes): the five passing seed-000 runs, the failing runs, the
# cold first repeat, and the seed-004 matrix. --strict exits 1 on any miss.
calibrate: build
	$(GO) run ./cmd/calibrate --faults --cold --matrix

# Client CPU per streamed chunk, sgtune's reader vs go-openai's Recv(), and
# the TTFT error against an injected delay at C128; last line is the summary.
bench-loadgen:
	$(GO) run ./cmd/bench-loadgen

clean:
	rm -rf bin sgtune.db sgtune.db-* best-launch.sh sgtune-logs
