# One command each: `make test` installs everything on a fresh machine (a virtual environment,
# the Python packages, the Kafka jars and Spark's Kafka connector through Maven) and runs the
# checks and the tests against two real local Kafka clusters.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install demo test test-slow test-spark test-nodes test-nodes-core test-old-source chaos unit lint shape toxiproxy bench-envelope bench-replicator bench-pipeline bench-latency bench-hops bench-scale bench-sizes bench-low-rate bench-catch-up bench-profile bench-commit bench-validate bench-offsetsync bench-groups bench-tls bench-memory bench-active-active bench-replication bench-rolling bench-split test-images images-tools kafka-jars spark-connector merge-jar kustomize promtool clean

install: $(VENV)/.installed kafka-jars spark-connector merge-jar kustomize promtool

# New top-level packages need a reinstall: the editable install maps the packages it saw.
$(VENV)/.installed: pyproject.toml $(wildcard */__init__.py)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,validator]'
	touch $@

kafka-jars: $(VENV)/.installed
	$(BIN)/exactly kafka install

# Spark's Ivy resolver cannot download here but reads ~/.m2 first (docs/design.md §9): put the
# connector and every jar it needs there now, not on every Spark run.
spark-connector:
	mvn --batch-mode --quiet -f deps/spark-kafka-connector.xml dependency:resolve

# The validator's merge plan (validator/java/): compiled once with javac against pyspark's Spark
# jars and the connector's Kafka client, into the cache beside the Kafka jars.
merge-jar: $(VENV)/.installed spark-connector
	$(BIN)/python -m validator.merge_jar

# kustomize renders k8s/ in the tests (tests/deploy), built once from the Go module proxy into
# the cache beside the Kafka jars. Without a Go toolchain those tests are skipped, and say so.
KUSTOMIZE_VERSION := v5.5.0
TOOLS_DIR := $(or $(LOCALKAFKA_CACHE_DIR),$(HOME)/.cache/kafka-exactly)/tools/kustomize-$(KUSTOMIZE_VERSION)
kustomize:
	@if [ -x "$(TOOLS_DIR)/kustomize" ]; then :; \
	elif command -v go >/dev/null 2>&1; then \
		GOBIN="$(TOOLS_DIR)" go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION); \
	else echo "no Go toolchain: the tests that render k8s/ with kustomize will be skipped"; fi

# promtool runs the alert rules' tests (tests/deploy/test_alerts.py): taken out of Debian's
# prometheus package, not installed (no daemon, no root), into the same cache. Elsewhere, one on
# PATH serves, or the tests are skipped and say so.
PROMTOOL_DIR := $(or $(LOCALKAFKA_CACHE_DIR),$(HOME)/.cache/kafka-exactly)/tools/promtool
promtool:
	@if [ -x "$(PROMTOOL_DIR)/promtool" ] || command -v promtool >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
		rm -rf "$(PROMTOOL_DIR).part" && mkdir -p "$(PROMTOOL_DIR).part" && cd "$(PROMTOOL_DIR).part" \
		&& { apt-get download prometheus 2>/dev/null || { apt-get update -qq && apt-get download prometheus; }; } \
		&& dpkg-deb -x prometheus_*.deb root && mv root/usr/bin/promtool . && rm -rf root prometheus_*.deb \
		&& cd - >/dev/null && rm -rf "$(PROMTOOL_DIR)" && mv "$(PROMTOOL_DIR).part" "$(PROMTOOL_DIR)"; \
	else echo "no apt-get: the alert rules' promtool tests will be skipped"; fi

# toxiproxy, for exactly chaos's network faults, built once from the Go module proxy into the
# same cache (exactly/chaos/network.py builds it on first use too; here it is not timed).
toxiproxy: $(VENV)/.installed
	@if command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ]; then \
		$(BIN)/python -c 'from exactly.chaos.network import ensure_toxiproxy; ensure_toxiproxy()'; \
	else echo "no Go toolchain: exactly chaos (and its tests: make test-slow, test-nodes) cannot inject network faults"; fi

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Issue 33's bounds (modules of at most 400 lines, functions of at most 60), exception roots,
# Kafka errors unpacked by hand, flow names built in place: a report, never a failure (a table
# may be longer than a function should be). --max-function N / --max-module N change the bounds.
shape: $(VENV)/.installed
	$(BIN)/python tools/code_shape.py

test: install toxiproxy lint
	$(BIN)/pytest --durations=25 $(PYTEST_ARGS)

# The README's first command: installs like `test`, then both stages on two fresh local
# clusters under live traffic, a SIGKILL of each, and the record-by-record verdict.
demo: install
	$(BIN)/exactly demo

# The long crash runs (30 SIGKILLs of each stage under traffic, 20 of stage 1 alone, a third
# deduplicator killed), the secure and the active-active demos, `exactly chaos`'s two mutants and
# its short run on three nodes, the network test and the shared target broker's SIGKILL: about
# 25 minutes here.
chaos: install toxiproxy
	$(BIN)/pytest -m chaos --durations=10 $(PYTEST_ARGS)

# The proofs of two to four minutes each, outside the default suite to keep it near its
# 20-minute budget: the two-minute `exactly chaos` run, the merge, compaction and two-way audits,
# and the tests of half a minute or more moved out of `make test` to keep it inside its 20
# minutes (about 12-18 minutes here). CI runs it after `make test`.
test-slow: install toxiproxy
	$(BIN)/pytest -m "slow and not spark" --durations=10 $(PYTEST_ARGS)

# The audit's other ways of running, the same code on another Spark: a standalone cluster,
# spark-submit, the validator image's jars alone (make test-images's image audits with them in
# CI); and the join plan forced where the default suite has the merge hand over to it (about 7
# minutes here). By hand: with them, CI's whole run took 109 minutes, over its 90, on a slow day.
test-spark: install
	$(BIN)/pytest -m spark --durations=10 $(PYTEST_ARGS)

# Issue 31: both stages between two clusters of three replicating nodes (replication factor 3,
# min.insync.replicas 2): a node SIGKILLed for what it leads or coordinates, rolling restarts
# (SIGTERM and SIGKILL), two target nodes down at once; each ends in the record-by-record
# verdict and the Spark audit; the stalls measured are printed at the end (12 to 30 minutes
# here, with the machine's load: 29 min 36 s at 4bdc570). Then `exactly kafka up` and `demo`
# with --nodes 3 as a user types them (about 2 minutes), in a run of their own: each makes
# clusters of its own, never beside tests/nodes' shared ones (`exactly chaos --nodes 3` is in
# `make chaos`).
test-nodes: install toxiproxy
	$(BIN)/pytest -m nodes tests/nodes --durations=10 $(PYTEST_ARGS)
	$(BIN)/pytest -m "nodes and not chaos" tests/cli/test_nodes_commands.py --durations=5 $(PYTEST_ARGS)

# The three-node scenarios whose bounds held in every run since they were written (about 5
# minutes): a node SIGKILLed for each thing it leads or coordinates, every leader of the flow
# moved, offset sync while its groups' coordinators move. CI runs the whole of test-nodes.
test-nodes-core: install toxiproxy
	$(BIN)/pytest -m nodes --durations=10 tests/nodes/test_failover.py tests/nodes/test_leaders.py \
		tests/nodes/test_offsetsync.py $(PYTEST_ARGS)

# Issue 32: the product's two images built from the Dockerfile and run under a Docker engine
# against the suite's local clusters, the validator's image auditing what they copied, and
# `docker compose up` of the shipped file with test-only stand-ins (tests/images). Installs what
# it runs with: Debian's docker.io (the engine is started for the tests and stopped after them)
# and debootstrap (the test base image), and Docker Compose v2 built from the Go module proxy.
test-images: install images-tools
	$(BIN)/pytest -m images tests/images --durations=10 $(PYTEST_ARGS)

COMPOSE_VERSION := v2.40.3
COMPOSE_DIR := $(or $(LOCALKAFKA_CACHE_DIR),$(HOME)/.cache/kafka-exactly)/tools/compose-$(COMPOSE_VERSION)
images-tools:
	@if [ ! -x /usr/sbin/dockerd ] || [ ! -x /usr/bin/docker ] || ! command -v debootstrap >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install --yes -qq \
			--no-install-recommends docker.io debootstrap; \
	fi
	@# Compose's go.mod has exclude directives, which `go install` refuses: built in a scratch module.
	@if [ ! -x "$(COMPOSE_DIR)/docker-compose" ]; then \
		rm -rf "$(COMPOSE_DIR).build" && mkdir -p "$(COMPOSE_DIR).build" && cd "$(COMPOSE_DIR).build" \
		&& go mod init compose-build >/dev/null 2>&1 \
		&& go get github.com/docker/compose/v2/cmd@$(COMPOSE_VERSION) \
		&& go build -o docker-compose github.com/docker/compose/v2/cmd \
		&& mkdir -p "$(COMPOSE_DIR)" && mv docker-compose "$(COMPOSE_DIR)/" \
		&& cd / && rm -rf "$(COMPOSE_DIR).build"; \
	fi

# The source-side scenarios (both stages' data mix, offset sync, the audit) with the source
# cluster on an older Apache Kafka, the target on ours (about 7 minutes here). Before 3.5 the
# source runs on ZooKeeper (OLD_SOURCE_KAFKA=2.8.2: the last 2.x; 2.7 is the oldest it can make).
# Not the slow audits: they prove Spark's ways of running (a standalone cluster, spark-submit),
# the same whichever Kafka the source runs; the audit of an older source runs all the same. Nor
# stage 2's own faults (a target broker's crash, bad staging records, the commit floor): they
# happen on the target, whichever Kafka the source runs.
OLD_SOURCE_KAFKA ?= 3.9.1
TARGET_ONLY := target_broker_crash or garbage_staging_record or changelog_partitioned_unlike \
	or on_bad_envelope_stop or commit_floor_bounds
test-old-source: install
	KAFKA_EXACTLY_TEST_SOURCE_KAFKA_VERSION=$(OLD_SOURCE_KAFKA) $(BIN)/pytest --durations=10 \
		-m "not chaos and not nodes and not slow" -k "not ($(TARGET_ONLY))" \
		tests/offsetsync tests/replication/test_deduplicator.py tests/replication/test_fenced.py \
		tests/validator/test_validate.py \
		$(PYTEST_ARGS)

# Pure logic only, no broker started. An explicit -m replaces pyproject's, so the image tests
# (a Docker engine, no broker: not marked kafka) are left out by name.
unit: $(VENV)/.installed
	$(BIN)/pytest -m "not kafka and not images" $(PYTEST_ARGS)

bench-envelope: $(VENV)/.installed
	$(BIN)/python -m bench.envelope_codec

# The hot path alone (no broker), then end to end on its own two local clusters (about a minute).
bench-replicator: install
	$(BIN)/python -m bench.replicator_hot_path
	$(BIN)/python -m bench.replicator_throughput

# Both stages beside a plain loop and MirrorMaker 2 (its jars resolved with Maven on the first run)
# on their own two local clusters: throughput (3 rounds, the median), latency at 1 k, 20 k and
# the highest rate, recovery after SIGKILLs; docs/performance.md (about 15 minutes).
bench-pipeline: install
	$(BIN)/python -m bench.pipeline_vs_mirrormaker --rounds 3 --mm2-recovery

# Issue 35's measure: latency as a user measures it from outside, both candidates at their
# defaults on fresh clusters per round, 1 k and 20 k records/s, three rounds each, p50/p99/max
# and the p99 ratio per round (about 20 minutes; docs/performance.md).
bench-latency: install
	$(BIN)/python -m bench.latency_outside --rates 1000,20000 --rounds 3

# Where a record's latency goes, hop by hop (staging, written, visible) at 1 k records/s, with
# stage 2's commit by call (about 80 seconds; docs/performance.md).
bench-hops: install
	$(BIN)/python -m bench.latency_hops --rate 1000

# Issue 34's partition axis: 1 M records of 1 KiB in 12 partitions of 1 topic, 240 of 20 and
# 1,200 of 100, copied by the plain loop, the pipeline and MirrorMaker 2 exactly-once: rate, CPU
# per record (roles, brokers), markers and transactions per second, start-up, peak RSS (about
# 10 minutes; docs/performance.md).
bench-scale: install
	$(BIN)/python -m bench.scale_partitions --tiers 12x1,240x20,1200x100

# Issue 34's record-size axis: 1 GB of values of 100 B (2 M records), 1 KiB, 100 KiB and 1 MiB
# in 12 partitions, copied by the same three: records/s, MB/s, CPU per record (docs/performance.md).
bench-sizes: install
	$(BIN)/python -m bench.scale_sizes

# Issue 34's low-rate axis: 10 records/s over 1,200 partitions in 100 topics, copied by one flow,
# one flow with a 1 s commit floor, ten flows and MirrorMaker 2 exactly-once: transactions and
# markers per second, CPU, latency (docs/performance.md).
bench-low-rate: install
	$(BIN)/python -m bench.low_rate

# Issue 34's catch-up axis: a backlog of 10 M records of 1 KiB drained by the pipeline and by
# MirrorMaker 2 exactly-once under 200 live records/s, then the latency once caught up
# (docs/performance.md).
bench-catch-up: install
	$(BIN)/python -m bench.catch_up

# Each stage alone under py-spy: where its main thread's time goes, flame graphs in ./profiles
# (about a minute).
bench-profile: install
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench.profile_stages

# Stage 2's commit limits (interval, records) against throughput and latency (about 5 minutes).
bench-commit: install
	$(BIN)/python -m bench.commit_limits

# Issue 20's measure: `exactly validate` (the merge, and --plan join) beside reading both topics
# once with a plain consumer, and its driver's peak memory: 5 M records of 100 B (goal: within
# 1.5x), 1 M of 100 B and 1 M of 1 KiB (goal: within 2x); about 20 minutes.
bench-validate: install
	$(BIN)/python -m bench.validator_vs_consumer --records 5000000 --record-bytes 100
	$(BIN)/python -m bench.validator_vs_consumer --records 1000000 --record-bytes 100
	$(BIN)/python -m bench.validator_vs_consumer --records 1000000 --record-bytes 1024

# Issue 18's measure: each role's time through the secured listeners (SASL_SSL source, mutual
# TLS target, least-privilege ACLs) beside PLAINTEXT, same brokers, 1 M records of 1 KiB, one run
# (about 12 minutes; docs/performance.md's table).
bench-tls: install
	$(BIN)/python -m bench.tls_cost --records 1000000 --rounds 2

# Issue 7's measure: offset sync's lag (p50/p99), its requests per second to each cluster and its
# CPU with 50 groups x 12 partitions committing every second under live traffic (about 1.5
# minutes).
bench-offsetsync: install
	$(BIN)/python -m bench.offsetsync_lag

# Issue 34's groups axis: offset sync with 50, 500 and 2,000 groups of 12 partitions, each meant
# to commit about every second: its lag p50/p99, its cycles and its CPU (with its two offset
# fetch processes), one invocation of bench.offsetsync_lag each, 120 s measured (about 12
# minutes).
bench-groups: install
	for groups in 50 500 2000; do \
		$(BIN)/python -m bench.offsetsync_lag --groups $$groups --duration 120 || exit 1; \
	done

# Each role's resident memory under 5,000 records/s of 1 KiB for 90 s: the basis of k8s/'s
# requests and limits (about 2 minutes).
bench-memory: install
	$(BIN)/python -m bench.role_memory

# Issue 19's measure: what the reverse flow of an active-active pair costs: A->B alone against
# A->B while B->A runs, 1 M records of 1 KiB each way, two rounds (about 3 minutes; docs/results.md,
# from docs/topologies.md).
bench-active-active: install
	$(BIN)/python -m bench.active_active --records 1000000 --rounds 2

clean:
	rm -rf $(VENV) .pytest_cache

# Issue 31's measure: the 1 KiB copy by every candidate (plain loop, pipeline, MirrorMaker 2
# both modes) on one-node clusters, then on clusters of three replicating nodes (RF 3,
# min.insync.replicas 2), 300 k records each (about 10 minutes; docs/replicated-clusters.md).
bench-replication: install
	$(BIN)/python -m bench.replication_cost --records 300000

# Issue 31's comparison: the pipeline and MirrorMaker 2 exactly-once copying through one rolling
# restart of both three-node clusters (SIGTERM, node by node; HOW=SIGKILL for crashes), 2,500
# records/s each: each destination's longest stall per node (about 12 minutes).
HOW ?= SIGTERM
bench-rolling: install
	$(BIN)/python -m bench.rolling_restart --how $(HOW)

# Issue 31's design question: one transactional producer for every partition (stage 2 today),
# one per partition (the proposal), and no transactions at all, each writing 5,000 records/s
# into a three-node cluster while a node is SIGKILLed (FAULTS=stop:group,stop:coordinator for
# controlled shutdowns, FAULTS=roll for a SIGTERM roll of every node): the destination's stalls
# per writer (about 10 minutes).
FAULTS ?= kill:leader,kill:coordinator
bench-split: install
	$(BIN)/python -m bench.transaction_split --faults $(FAULTS)
