# pos — build, test, demo and install. See README.md.
#
#   make            build everything into build/
#   make test       build and run every test that needs no GPU
#   make deps-hashcat  install hashcat, the third-party program a test runs on the simulated driver
#   make deps-timeline install chromium, which scripts/timeline_png.sh renders timelines with
#   make deps-podman   install podman, which a test starts a container with the CDI device in
#   make demo       run the main job on the simulated GPU (or a real one, if present)
#   make install    install under $(DESTDIR)$(PREFIX)
#   make bench      run the benchmarks that write docs/results/
#   make bench-e2e  possim against real processes, every case both ways (docs/results/e2e.md)
#   make bench-e2e-host  possim only, with and without time slices in its host model,
#                   against the real runs of docs/results/e2e.md (docs/results/e2e-host.md)
#   make bench-hostcal  what the host's work costs the CPU, possim's [host] defaults (docs/results/hostcal.md)
#   make bench-simlock  how long processes wait for the simulated GPU's lock (docs/results/simlock.md)
#   make bench-simdevice BASELINE=DIR  the simulated driver end to end against another build's
#                       (docs/results/simdevice.md)
#   make bench-saves [BASELINE=DIR]  grant waits during profile saves (docs/results/saves.md)
#   make bench-simisolation  whether a stopped or SCHED_IDLE process moves the others' p99 (docs/results/simisolation.md)
#   make bench-pos  the pos policy against fifo and priority (docs/results/pos.md)
#   make bench-isolation  a latency client beside steady and churning batch work, end to end and
#                       in possim (docs/results/isolation.md)
#   make bench-kube  pods against processes and podman+CDI containers, posd and kubelet restarts,
#                       one ConfigMap's shares and SLOs (root; docs/results/kubernetes.md)
#   make bench-cpu  the CPU lever ([policy] cpu) on make demo's mix, off/idle/nice (docs/results/cpu.md)
#   make bench-memory  what the memory ledger adds to an allocation, and the launch path (docs/results/memory.md)
#   make bench-profiles  kernel profiles end to end, device times against poll times
#                       (docs/results/profiles.md)
#   make bench-search  static schedule search, followed in possim (docs/results/search.md)
#   make bench-frontier  what pos's co-location knobs reach on issue 19's mixes, in possim
#                       (docs/results/frontier.md)
#   make bench-metricsattack  the metrics endpoint under 1,000 slow or idle connections of one
#                       user (docs/results/reliability.md)
#   make gpu-build  the folder the real-GPU suite carries (build/gpu, docs/gpu.md)
#   make gpu-dry-run  the real-GPU suite against the simulated driver (build/gpu-dry-run)
#   make fuzz       every libFuzzer target for FUZZ_SECONDS each (tests/fuzz/)
#   make check-static  cppcheck and clang-tidy (scripts/check-static.sh), and no new circle of
#                   files in a folder (scripts/circles.py, scripts/circles.known)
#   make memcheck   posd under valgrind's memcheck through an integration run (tests/memcheck.sh)
#   make soak       the fault suite's long form for SOAK_MINUTES (docs/results/reliability.md)
#
# As root, missing Debian packages are installed on the first build (scripts/deps.sh).

CUDA_HOME ?= /usr/local/cuda
PREFIX    ?= /usr/local
DESTDIR   ?=
B         := build

.DEFAULT_GOAL := all

CC      ?= cc
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Wno-unused-parameter $(if $(WERROR),-Werror)
CPPFLAGS += -D_GNU_SOURCE -Iinclude -I. -I$(CUDA_HOME)/include
ALL_CFLAGS = $(CFLAGS) $(SAN_FLAGS) $(WARN) -std=gnu11 -fPIC -pthread -MMD -MP

# SANITIZE=address,undefined (or thread, ...): -fsanitize=$(SANITIZE) on every compile and
# link line. build/.sanitize remembers the value, so switching it rebuilds everything.
SANITIZE ?=
SAN_FLAGS := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer)
LINK_FLAGS = $(SAN_FLAGS) $(LDFLAGS)
SAN_STAMP := $(B)/.sanitize
ifneq ($(file <$(SAN_STAMP)),$(SANITIZE))
$(SAN_STAMP): FORCE
endif
$(SAN_STAMP):
	@mkdir -p $(B)
	@printf '%s' '$(SANITIZE)' > $@
FORCE:
# The runtime a sanitized shim needs first in a process's LD_PRELOAD (the tests put it there).
comma := ,
SAN_LIST := $(subst $(comma), ,$(SANITIZE))
SAN_RUNTIME := $(if $(filter address,$(SAN_LIST)),$(shell $(CC) -print-file-name=libasan.so),$(if \
    $(filter thread,$(SAN_LIST)),$(shell $(CC) -print-file-name=libtsan.so)))
# How many times slower the tests' programs run in this build: the tests scale the times they
# wait and measure in by it (POS_TEST_TIME_SCALE, tests/integration/util.h util_time_scale)
TEST_TIME_SCALE := $(if $(filter thread,$(SAN_LIST)),10,$(if $(SANITIZE),3,1))
# LeakSanitizer's runtime, which a test preloads into unsanitized programs (a sanitized build
# checks its processes itself)
LSAN_RUNTIME := $(if $(SANITIZE),,$(shell $(CC) -print-file-name=liblsan.so))

CUDA_STUB := $(CUDA_HOME)/lib64/stubs


# --- dependencies -----------------------------------------------------------------------
DEPS_STAMP := $(B)/.deps-ok
$(DEPS_STAMP): scripts/deps.sh
	@mkdir -p $(B)
	@CUDA_HOME=$(CUDA_HOME) bash scripts/deps.sh
	@touch $@
# Included, so that make reads this file again once the packages are there: what it finds
# below (bpftool, libbpf, ...) is then what the machine has, on the very first build too.
ifeq ($(filter clean format,$(MAKECMDGOALS)),)
include $(DEPS_STAMP)
endif

# Optional: Debian's hashcat (about 100 MB with its OpenCL runtime), the third-party program
# tests/integration/test_hashcat.c runs on the simulated driver (skipped without it).
deps-hashcat:
	@bash scripts/deps.sh --hashcat

# Optional: Debian's chromium (about 250 MB), which scripts/timeline_png.sh renders a timeline
# with (docs/timeline.md).
deps-timeline:
	@bash scripts/deps.sh --chromium

# Optional: Debian's podman (4.3, with crun and conmon), which the container part of
# tests/integration/test_posctl_cdi.c runs a container with the CDI device through (skipped
# without it).
deps-podman:
	@bash scripts/deps.sh --podman

# A target's tools, checked when it runs: one line naming the Debian package of each missing.
NEED = @bash scripts/deps.sh --need $@

# --- objects --------------------------------------------------------------------------
$(B)/obj/%.o: %.c $(DEPS_STAMP) $(SAN_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

# the network of policy learned: vectorised at -O3 (its forward pass is most of a decision of
# learned at 8 clients; no fast-math: the same results as at -O2)
$(B)/obj/sched/nn.o: ALL_CFLAGS += -O3

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

# The virtual-GPU model: pure code, shared by the simulated driver and the tests.
SIM_MODEL_SRCS := sim/gpu_model.c sim/device_presets.c
# The simulated CUDA driver (libcuda.so.1).
SIM_DRIVER_SRCS := $(wildcard sim/driver/*.c) sim/module_text.c
# Model workload files, read by posapp and the tests.
SIM_WORKLOAD_SRCS := sim/model_file.c
# The request builder: the kernel sequence of one request, shared by posapp and possim.
SIM_REQUEST_SRCS := sim/request.c

INIH_LIBS := $(shell pkg-config --libs inih 2>/dev/null || echo -linih)

# --- products ---------------------------------------------------------------------------
SIM_LIB := $(B)/sim/libcuda.so.1
SIM_DEVICE := $(B)/sim/pos-sim-device
POSAPP  := $(B)/posapp
SHIM    := $(B)/libposshim.so
POSSTAT := $(B)/posstat
POSSIM  := $(B)/possim

POSD    := $(B)/posd
POSCTL  := $(B)/posctl
POSTRACE := $(B)/postrace

all: $(SIM_LIB) $(SIM_DEVICE) $(B)/sim/libcuda.so $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCTL) $(POSTRACE) $(POSSIM)

# The daemon: event loop, clients, engine, config, policies, telemetry.
POSD_SRCS := $(filter-out sched/config.c,$(wildcard sched/*.c)) $(wildcard sched/policy/*.c)
URING_LIBS := $(shell pkg-config --libs liburing 2>/dev/null || echo -luring)
# libmicrohttpd serves posd's --metrics endpoint (Debian's libmicrohttpd-dev)
MHD_LIBS := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
# The kubelet's pod-resources client (kube/podres.c over kube/grpc.c; KUBE_PODRES_OBJS below):
# posd's pod resolver (sched/pod_resolver.c) asks it for List (docs/posd.md, "Pod identity").
$(call obj,sched/pod_resolver.c): $(KUBE_PB_H)
$(POSD): $(call obj,$(POSD_SRCS) sched/config.c)
	$(CC) $(LINK_FLAGS) -o $@ $^ $(URING_LIBS) $(INIH_LIBS) $(MHD_LIBS) $(BPF_LIBS) $(KUBE_LIBS) -lm -pthread

# --- eBPF telemetry (bpf/, linked into posd by sched/telemetry.c) --------------------------
# Built when the kernel has BTF and clang can target BPF; otherwise (or with POS_NO_BPF=1) posd
# is built without it and make says why in one line. vmlinux.h and the skeleton are generated
# into build/bpf/. build/.bpf remembers the choice, so switching it rebuilds telemetry.o.
BTF_VMLINUX ?= /sys/kernel/btf/vmlinux
BPF_CLANG   ?= clang
BPFTOOL     ?= $(or $(shell command -v bpftool 2>/dev/null),$(wildcard /usr/sbin/bpftool))
BPF_ARCH    := $(patsubst x86_64,x86,$(patsubst aarch64,arm64,$(shell uname -m)))
POS_NO_BPF  ?=
BPF_WHY := $(strip $(if $(POS_NO_BPF),POS_NO_BPF=$(POS_NO_BPF),$(if \
    $(wildcard $(BTF_VMLINUX)),,the kernel has no BTF at $(BTF_VMLINUX))$(if \
    $(shell $(BPF_CLANG) -print-targets 2>/dev/null | grep -w bpf),, $(BPF_CLANG) cannot target \
    BPF)$(if $(BPFTOOL),, no bpftool)$(if $(shell pkg-config --exists libbpf 2>/dev/null && echo y),, \
    no libbpf)))
ifneq ($(BPF_WHY),)
ifneq ($(wildcard $(DEPS_STAMP)),) # said once the packages were checked, not before
$(info make: posd is built without eBPF telemetry: $(BPF_WHY))
endif
BPF_CFLAGS := -DPOS_NO_BPF
BPF_LIBS   :=
else
BPF_CFLAGS := -I$(B)/bpf
BPF_LIBS   := $(shell pkg-config --libs libbpf)
BPF_SKELS  := $(B)/bpf/telemetry.skel.h
endif
BPF_STAMP := $(B)/.bpf
ifneq ($(file <$(BPF_STAMP)),$(BPF_CFLAGS))
$(BPF_STAMP): FORCE
endif
$(BPF_STAMP):
	@mkdir -p $(B)
	@printf '%s' '$(BPF_CFLAGS)' > $@

$(B)/bpf/vmlinux.h:
	@mkdir -p $(dir $@)
	$(BPFTOOL) btf dump file $(BTF_VMLINUX) format c > $@.tmp && mv $@.tmp $@

$(B)/bpf/%.bpf.o: bpf/%.bpf.c bpf/%.h $(B)/bpf/vmlinux.h
	$(BPF_CLANG) -g -O2 -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -I$(B)/bpf -I. -c $< -o $@
	$(if $(shell command -v llvm-strip 2>/dev/null),llvm-strip -g $@)

$(B)/bpf/%.skel.h: $(B)/bpf/%.bpf.o
	$(BPFTOOL) gen skeleton $< name $*_bpf > $@.tmp && mv $@.tmp $@

$(B)/obj/sched/telemetry.o: sched/telemetry.c $(BPF_SKELS) $(BPF_STAMP) $(DEPS_STAMP) $(SAN_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(BPF_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

# The interposer: everything hidden but the intercepted cu* entry points and dlsym.
SHIM_SRCS := $(wildcard shim/*.c)
$(B)/obj/shim/%.o: shim/%.c $(DEPS_STAMP) $(SAN_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -fvisibility=hidden -c $< -o $@

$(SHIM): $(call obj,$(SHIM_SRCS))
	$(CC) $(LINK_FLAGS) -shared -Wl,-soname,libposshim.so -Wl,-Bsymbolic-functions -Wl,-z,defs -o $@ $^ \
	    -ldl -pthread

# CUresult names and texts, generated from the toolkit's own cuda.h
$(B)/gen/cu_errors.h: scripts/gen_cu_errors.sh $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	bash scripts/gen_cu_errors.sh $(CUDA_HOME)/include/cuda.h $@

# Every entry point of the toolkit's cuda.h, and cuGetProcAddress's rows for each ABI of each
# (cu_procaddr.h), generated from the headers themselves
$(B)/gen/cu_exports.h: scripts/gen_cu_exports.sh $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	CC='$(CC)' bash scripts/gen_cu_exports.sh $(CUDA_HOME)/include $(dir $@)
$(B)/gen/cu_procaddr.h: $(B)/gen/cu_exports.h

# The driver starts its device process from beside itself, else from where the build put it
# (a copy of the library alone elsewhere, as valgrind runs use; docs/sim.md).
$(B)/obj/sim/driver/%.o: sim/driver/%.c $(B)/gen/cu_errors.h $(B)/gen/cu_exports.h $(DEPS_STAMP) $(SAN_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -I$(B)/gen $(ALL_CFLAGS) -fvisibility=hidden \
	    -DPOS_SIM_DEVICE_FALLBACK='"$(abspath $(SIM_DEVICE))"' -c $< -o $@

# The device process of a virtual GPU (sim/driver/device.c): a program over the library.
$(SIM_DEVICE): $(B)/obj/sim/device_main.o $(SIM_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $< $(SIM_LIB) -Wl,-rpath,'$$ORIGIN'

$(SIM_LIB): $(call obj,$(SIM_DRIVER_SRCS) $(SIM_MODEL_SRCS)) sim/driver/libcuda.map
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,--version-script=sim/driver/libcuda.map \
	    -Wl,-Bsymbolic-functions -Wl,-z,defs -o $@ $(filter %.o,$^) $(INIH_LIBS) -lrt -lm -pthread

$(B)/sim/libcuda.so: $(SIM_LIB)
	ln -sf libcuda.so.1 $@

POSAPP_SRCS := $(wildcard tools/posapp*.c)
$(POSAPP): $(call obj,$(POSAPP_SRCS) $(SIM_WORKLOAD_SRCS) $(SIM_REQUEST_SRCS))
	$(CC) $(LINK_FLAGS) -o $@ $^ -L$(CUDA_STUB) -lcuda -lm -pthread

# posd's protocol, the client side: the tools and the integration tests speak it through this.
POSCLIENT_OBJ := $(call obj,tools/posclient.c)
# How memory limits and sizes are written (posd's files, posctl's option, posstat's columns).
MEM_LIMIT_OBJ := $(call obj,sched/mem_limit.c)
$(POSSTAT): $(call obj,tools/posstat.c tools/posstat_format.c tools/posstat_nvml.c \
    sched/metrics_text.c) $(POSCLIENT_OBJ) $(MEM_LIMIT_OBJ)
	$(CC) $(LINK_FLAGS) -o $@ $^ -ldl

$(POSCTL): $(call obj,tools/posctl.c tools/posstat_format.c kube/cdi.c kube/edits.c) $(POSCLIENT_OBJ) $(MEM_LIMIT_OBJ)
	$(CC) $(LINK_FLAGS) -o $@ $^

$(POSTRACE): $(call obj,tools/postrace.c tools/timeline.c)
	$(CC) $(LINK_FLAGS) -o $@ $^

# --- Kubernetes (kube/): the device plugin and the kubelet's gRPC APIs ---------------------
# kube/proto/*.proto (ours, from the kubelet's api.proto files) become protobuf-c code in
# build/gen/kube/ (NAME.pb-c.c, NAME.pb-c.h) and descriptor sets (NAME.desc) that the Python
# fakes of tests/kube/ build their messages from.
KUBE_PROTOS := $(wildcard kube/proto/*.proto)
KUBE_PB_C   := $(patsubst kube/proto/%.proto,$(B)/gen/kube/%.pb-c.c,$(KUBE_PROTOS))
KUBE_PB_H   := $(KUBE_PB_C:.c=.h)
KUBE_DESCS  := $(patsubst kube/proto/%.proto,$(B)/gen/kube/%.desc,$(KUBE_PROTOS))
KUBE_LIBS   := $(shell pkg-config --libs libprotobuf-c libnghttp2 2>/dev/null || echo -lprotobuf-c -lnghttp2)
# protoc-c names the service stub's member of rpc Register `register`, a C keyword: it becomes
# register_ (the stubs are unused: kube/grpc.c serves and calls by path).
$(B)/gen/kube/%.pb-c.c $(B)/gen/kube/%.pb-c.h: kube/proto/%.proto $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	protoc-c --proto_path=kube/proto --c_out=$(B)/gen/kube $<
	sed -i 's/(\*register)(/(*register_)(/' $(B)/gen/kube/$*.pb-c.h
$(B)/gen/kube/%.desc: kube/proto/%.proto $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	protoc-c --proto_path=kube/proto --descriptor_set_out=$@ $<
# kube/ includes the generated headers: they come first.
KUBE_SRCS := $(wildcard kube/*.c)
$(call obj,$(KUBE_SRCS)): $(B)/obj/kube/%.o: kube/%.c $(KUBE_PB_H) $(DEPS_STAMP) $(SAN_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -I$(B)/gen/kube $(ALL_CFLAGS) -c $< -o $@
# gRPC over HTTP/2 (kube/grpc.c) with the generated messages, and the pod-resources client
# that posd links (kube/podres.c).
KUBE_GRPC_OBJS := $(call obj,kube/grpc.c) $(patsubst %.c,$(B)/obj/%.o,$(KUBE_PB_C))
KUBE_PODRES_OBJS := $(call obj,kube/podres.c) $(KUBE_GRPC_OBJS)
$(POSD): $(KUBE_PODRES_OBJS)
# The kubelet's device plugin (docs/device-plugin.md), which speaks to posd through posclient.
KUBE_PLUGIN := $(B)/pos-device-plugin
$(KUBE_PLUGIN): $(call obj,kube/plugin_main.c kube/plugin.c kube/shares.c kube/edits.c) \
    $(KUBE_GRPC_OBJS) $(POSCLIENT_OBJ)
	$(CC) $(LINK_FLAGS) -o $@ $^ $(KUBE_LIBS) -pthread
all: $(KUBE_PLUGIN) $(KUBE_DESCS)

# The simulator: the scheduling core and policies, the device model, the model workloads and
# the request builder, posapp's arrival processes and statistics, in virtual time.
SCHED_CORE_SRCS := sched/core.c sched/profile.c sched/profile_file.c sched/schedule.c \
    sched/schedule_file.c sched/nn.c sched/weights.c $(wildcard sched/policy/*.c)
POSSIM_LIB_SRCS := tools/possim_scenario.c tools/possim_sim.c tools/possim_host.c sched/weights_file.c \
    tools/possim_search.c tools/possim_train.c tools/possim_sac.c \
    tools/timeline.c sched/ini_lines.c \
    $(SCHED_CORE_SRCS) $(SIM_MODEL_SRCS) $(SIM_WORKLOAD_SRCS) $(SIM_REQUEST_SRCS) \
    tools/posapp_arrival.c tools/posapp_stats.c
$(POSSIM): $(call obj,tools/possim.c $(POSSIM_LIB_SRCS))
	$(CC) $(LINK_FLAGS) -o $@ $^ $(INIH_LIBS) -lm

# --- tests ----------------------------------------------------------------------------
# Each tests/unit/test_NAME.c is one CUnit binary; TEST_DEPS_test_NAME and TEST_LIBS_test_NAME
# add what it needs.
UNIT_SRCS  := $(wildcard tests/unit/test_*.c)
UNIT_BINS  := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRCS))
INTEG_SRCS := $(wildcard tests/integration/test_*.c)
INTEG_BINS := $(patsubst tests/integration/%.c,$(B)/tests/%,$(INTEG_SRCS))

# TEST_DEPS_test_NAME: objects and products the binary links and depends on;
# TEST_LIBS_test_NAME: extra -l libraries.
TEST_OBJS_model := $(call obj,$(SIM_MODEL_SRCS))
SIM_LIB_LINK := $(SIM_LIB) -Wl,-rpath,'$$ORIGIN/../sim'
TEST_DEPS_test_gpu_model      := $(TEST_OBJS_model)
TEST_DEPS_test_device_presets := $(TEST_OBJS_model)
TEST_DEPS_test_model_file     := $(call obj,$(SIM_WORKLOAD_SRCS))
TEST_DEPS_test_module_text    := $(call obj,sim/module_text.c)
TEST_DEPS_test_posapp_arrival := $(call obj,tools/posapp_arrival.c)
TEST_DEPS_test_posapp_stats   := $(call obj,tools/posapp_stats.c)
TEST_DEPS_test_posstat_format := $(call obj,tools/posstat_format.c) $(POSCLIENT_OBJ) $(MEM_LIMIT_OBJ)
TEST_DEPS_test_sim_driver     := $(SIM_LIB)
TEST_LIBS_test_sim_driver     := -lelf
TEST_DEPS_test_sim_memory     := $(SIM_LIB)
TEST_DEPS_test_sim_startup    := $(SIM_LIB)
TEST_LIBS_test_sim_startup    := -lelf -ldl
TEST_DEPS_test_testbed        := $(SIM_LIB) $(POSAPP)
TEST_DEPS_test_policy         := $(call obj,$(SCHED_CORE_SRCS))
TEST_DEPS_test_profile        := $(call obj,sched/profile.c sched/profile_file.c)
TEST_DEPS_test_nn             := $(call obj,sched/nn.c)
TEST_DEPS_test_sac            := $(call obj,tools/possim_sac.c sched/nn.c)
TEST_DEPS_test_weights        := $(call obj,sched/weights.c sched/nn.c)
TEST_DEPS_test_core           := $(call obj,$(SCHED_CORE_SRCS))
TEST_DEPS_test_schedule       := $(call obj,$(SCHED_CORE_SRCS))
TEST_DEPS_test_shim_table     := $(SIM_LIB) $(SHIM)
TEST_DEPS_test_cdi            := $(call obj,kube/cdi.c kube/edits.c)
TEST_DEPS_test_config         := $(call obj,sched/config.c sched/ini_lines.c sched/mem_limit.c \
    $(SCHED_CORE_SRCS))
TEST_DEPS_test_pod            := $(call obj,sched/pod_cgroup.c sched/pod_names.c)
TEST_DEPS_test_possim         := $(call obj,$(POSSIM_LIB_SRCS)) $(POSSIM)
TEST_DEPS_test_possim_search  := $(call obj,$(POSSIM_LIB_SRCS))
TEST_DEPS_test_possim_train   := $(call obj,$(POSSIM_LIB_SRCS)) $(POSSIM)
TEST_LIBS_test_possim_train   := -linih -lm
TEST_LIBS_test_shim_table     := -ldl
TEST_DEPS_test_wire           := $(call obj,sched/wire.c sched/engine.c sched/cpu.c sched/files.c sched/clock.c sched/log.c \
    sched/names.c sched/profile_store.c \
    sched/ini_lines.c sched/mem_ledger.c sched/mem_limit.c $(SCHED_CORE_SRCS))
TEST_DEPS_test_kube_shares   := $(call obj,kube/shares.c)
TEST_DEPS_test_engine         := $(call obj,sched/engine.c sched/cpu.c sched/files.c sched/log.c sched/config.c \
    sched/names.c sched/profile_store.c \
    sched/ini_lines.c sched/mem_ledger.c sched/mem_limit.c $(SCHED_CORE_SRCS))

.SECONDEXPANSION:
$(B)/tests/%: $(B)/obj/tests/unit/%.o $$(TEST_DEPS_$$*)
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $< $(subst $(SIM_LIB),$(SIM_LIB_LINK),$(filter-out $(POSAPP) $(SHIM) $(SHIM_PROGS) $(POSD) $(POSSTAT) $(POSCTL) $(POSTRACE) $(POSSIM),$(TEST_DEPS_$*))) \
	    $(TEST_LIBS_$*) $(INIH_LIBS) -lcunit -lrt -lm -pthread

$(B)/tests/%: $(B)/obj/tests/integration/%.o $$(TEST_DEPS_$$*)
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $< $(subst $(SIM_LIB),$(SIM_LIB_LINK),$(filter-out $(POSAPP) $(SHIM) $(SHIM_PROGS) $(POSD) $(POSSTAT) $(POSCTL) $(POSTRACE) $(POSSIM) $(FAKE_NVML) $(FAKE_NVML_SIM) $(HOSTILE) $(KUBE_PLUGIN) $(KUBE_DESCS),$(TEST_DEPS_$*))) \
	    $(TEST_LIBS_$*) $(INIH_LIBS) -lcunit -lrt -lm -pthread

# Programs the shim's integration test runs (tests/shim/prog_*.c): some link -lcuda, some
# find the driver with dlopen.
SHIM_PROGS := $(patsubst tests/shim/prog_%.c,$(B)/tests/shim_%,$(wildcard tests/shim/prog_*.c))
SHIM_PROG_LINK_dlopen  := -ldl
SHIM_PROG_LINK_runtime := -ldl -pthread
SHIM_PROG_LINK_nocuda  := -ldl
SHIM_PROG_LINK_graph   := -L$(CUDA_STUB) -lcuda
SHIM_PROG_LINK_fork    := -L$(CUDA_STUB) -lcuda
SHIM_PROG_LINK_threads := -L$(CUDA_STUB) -lcuda -pthread
SHIM_PROG_LINK_puts    := -L$(CUDA_STUB) -lcuda
SHIM_PROG_LINK_prefork := -L$(CUDA_STUB) -lcuda
SHIM_PROG_LINK_mps     := -L$(CUDA_STUB) -lcuda
SHIM_PROG_LINK_memload := -L$(CUDA_STUB) -lcuda -pthread
SHIM_PROG_LINK_mem     := -L$(CUDA_STUB) -lcuda -pthread -ldl
# ... and an interposer they preload with the shim (tests/shim/lib_NAME.c)
SHIM_PROGS += $(patsubst tests/shim/lib_%.c,$(B)/tests/lib%.so,$(wildcard tests/shim/lib_*.c))
$(B)/tests/lib%.so: $(B)/obj/tests/shim/lib_%.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -shared -o $@ $< -ldl
$(B)/tests/shim_%: $(B)/obj/tests/shim/prog_%.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $< $(SHIM_PROG_LINK_$*)
TEST_DEPS_test_shim := $(SIM_LIB) $(POSAPP) $(SHIM) $(SHIM_PROGS)
TEST_DEPS_test_deploy := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCTL) $(POSTRACE) $(POSSIM)
TEST_DEPS_test_posctl_cdi := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSCTL) $(POSCLIENT_OBJ)
TEST_DEPS_test_posctl := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCTL) $(POSTRACE) $(POSSIM) $(POSCLIENT_OBJ)
TEST_DEPS_test_metrics := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCLIENT_OBJ)
TEST_DEPS_test_timeline := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSSIM) $(POSTRACE)
TEST_DEPS_test_install := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCTL) $(POSTRACE) $(POSSIM)
# a stand-in NVML (tests/fakes/nvml.c) that test_posstat dlopens through posstat
FAKE_NVML := $(B)/tests/fakes/libnvidia-ml.so.1
$(FAKE_NVML): $(B)/obj/tests/fakes/nvml.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $<
# ... and one that shows the simulated driver's device, for the shim's memory tests
FAKE_NVML_SIM := $(B)/tests/fakes/sim/libnvidia-ml.so.1
$(FAKE_NVML_SIM): $(B)/obj/tests/fakes/nvml_sim.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $< -ldl
TEST_DEPS_test_shim_mem := $(SIM_LIB) $(SHIM) $(POSD) $(SHIM_PROGS) $(FAKE_NVML_SIM) $(TEST_OBJS_model) \
    $(POSCLIENT_OBJ)
TEST_DEPS_test_posstat := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCLIENT_OBJ) $(FAKE_NVML)
TEST_DEPS_test_posd := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCTL) $(POSCLIENT_OBJ)
TEST_DEPS_test_state_dir := $(POSD) $(POSCTL)
TEST_DEPS_test_learned := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(call obj,sched/weights_file.c sched/weights.c sched/nn.c)
TEST_LIBS_test_learned := -lm
TEST_DEPS_test_posd_mem := $(POSD) $(POSCTL) $(POSSTAT) $(POSCLIENT_OBJ)
TEST_DEPS_test_cpu := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSCTL) $(SHIM_PROGS) $(POSCLIENT_OBJ)
TEST_DEPS_test_mps := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(SHIM_PROGS) $(TEST_OBJS_model)
TEST_DEPS_test_shim_posd := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(SHIM_PROGS) \
    $(POSCLIENT_OBJ)
TEST_DEPS_test_telemetry := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(SHIM_PROGS) \
    $(call obj,tools/posstat_format.c) $(POSCLIENT_OBJ) $(MEM_LIMIT_OBJ)
SHIM_PROG_LINK_holdsock := -L$(CUDA_STUB) -lcuda
SHIM_PROG_LINK_ioctls   := -L$(CUDA_STUB) -lcuda
TEST_DEPS_test_hashcat := $(SIM_LIB) $(SHIM) $(POSD)
TEST_DEPS_test_sim_stop := $(SIM_LIB)
TEST_DEPS_test_sim_isolation := $(SIM_LIB)
TEST_DEPS_test_sim_agents := $(SIM_LIB)
TEST_DEPS_test_memory := $(SIM_LIB) $(SHIM) $(POSD) $(SHIM_PROGS) $(FAKE_NVML_SIM) $(POSCLIENT_OBJ)
TEST_DEPS_test_valgrind := $(SIM_LIB) $(POSAPP) $(POSD)
# The hostile client test_hostile runs as another user (tests/integration/hostile.c).
HOSTILE := $(B)/tests/hostile
$(HOSTILE): $(B)/obj/tests/integration/hostile.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $<
TEST_DEPS_test_hostile := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(HOSTILE)
TEST_DEPS_test_faults := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT)
# The Kubernetes tests run the Python fakes of tests/kube/ on the descriptor sets.
TEST_DEPS_test_kube_podres := $(KUBE_PODRES_OBJS) $(KUBE_DESCS)
TEST_LIBS_test_kube_podres := $(KUBE_LIBS)
TEST_DEPS_test_kube_plugin := $(KUBE_PLUGIN) $(KUBE_DESCS) $(POSD) $(SHIM) $(POSCLIENT_OBJ)
TEST_DEPS_test_pods := $(SIM_LIB) $(POSAPP) $(SHIM) $(POSD) $(POSSTAT) $(POSCLIENT_OBJ) $(KUBE_DESCS)

# --- fuzzing (tests/fuzz/) -------------------------------------------------------------
# libFuzzer targets, each built from its sources with clang's fuzzer and ASan/UBSan runtimes
# (libclang-rt-14-dev); any UBSan finding aborts the run. make test runs each for
# FUZZ_SMOKE_SECONDS after replaying its seed corpus; make fuzz for FUZZ_SECONDS.
FUZZ_CC    ?= clang
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer
FUZZ_SECONDS       ?= 60
FUZZ_SMOKE_SECONDS ?= 3
FUZZ_ENGINE_SRCS := sched/engine.c sched/cpu.c sched/files.c sched/core.c sched/log.c sched/ini_lines.c sched/config.c \
    sched/names.c sched/profile_store.c sched/stats.c \
    sched/mem_ledger.c sched/mem_limit.c \
    sched/profile.c sched/profile_file.c sched/schedule.c sched/schedule_file.c \
    sched/nn.c sched/weights.c $(wildcard sched/policy/*.c)
FUZZ_SRCS_wire        := sched/wire.c sched/clock.c $(FUZZ_ENGINE_SRCS)
FUZZ_SRCS_ring        := $(FUZZ_ENGINE_SRCS)
FUZZ_DEFS_ring        := -DSCHED_MAX_CLIENTS=8
FUZZ_SRCS_config      := sched/config.c sched/ini_lines.c sched/mem_limit.c $(SCHED_CORE_SRCS)
FUZZ_SRCS_pod         := sched/pod_cgroup.c sched/pod_names.c
FUZZ_SRCS_module_text := sim/module_text.c
FUZZ_SRCS_model_file  := sim/model_file.c
FUZZ_SRCS_weights     := sched/weights.c sched/nn.c
FUZZ_BINS := $(patsubst tests/fuzz/fuzz_%.c,$(B)/fuzz/fuzz_%,$(wildcard tests/fuzz/fuzz_*.c))
$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $$(FUZZ_SRCS_$$*) $(wildcard tests/fuzz/*.h) $(DEPS_STAMP)
	@bash scripts/deps.sh --need fuzz $(FUZZ_CC)=clang
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_DEFS_$*) $(FUZZ_FLAGS) -std=gnu11 -pthread -o $@ $< $(FUZZ_SRCS_$*) \
	    $(INIH_LIBS) -lm

fuzz: $(FUZZ_BINS)
	$(NEED) $(FUZZ_CC)=clang
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

test: all $(UNIT_BINS) $(INTEG_BINS) gpu-build $(FUZZ_BINS)
	@B=$(B) POS_TEST_SAN_RUNTIME='$(SAN_RUNTIME)' POS_TEST_LSAN_RUNTIME='$(LSAN_RUNTIME)' \
	    POS_TEST_TIME_SCALE=$(TEST_TIME_SCALE) bash tests/run.sh $(UNIT_BINS) $(INTEG_BINS)
	@echo "=== tests/fuzz/run.sh: each fuzz target briefly, its corpus and past crashes first"
	@bash tests/fuzz/run.sh $(FUZZ_SMOKE_SECONDS) $(FUZZ_BINS)
	@echo "=== tests/gpu/run.sh --sim (the real-GPU suite's dry run; report in $(B)/gpu-dry-run)"
	@CUDA_HOME=$(CUDA_HOME) bash tests/gpu/run.sh $(B)/gpu-dry-run --sim

# --- demo, benchmarks -----------------------------------------------------------------
demo: all
	@bash scripts/demo.sh

# What a stopped process does to the simulated GPU (bench/simstop.sh)
SIMSTOP := $(B)/bench/simstop
$(SIMSTOP): $(B)/obj/bench/simstop.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $< -L$(CUDA_STUB) -lcuda

# The process bench/simisolation.sh stops at random moments or runs at SCHED_IDLE
SIMISOLATION := $(B)/bench/simisolation
$(SIMISOLATION): $(B)/obj/bench/simisolation.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $< -L$(CUDA_STUB) -lcuda -lm

# The client that waits for each grant while bench/saves.sh has posd save its profiles
SAVEGRANT := $(B)/bench/savegrant
$(SAVEGRANT): $(B)/obj/bench/savegrant.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $<

# The attacker bench/metricsattack.sh runs against posd's metrics endpoint as another user
METRICSATTACK := $(B)/bench/metricsattack
$(METRICSATTACK): $(B)/obj/bench/metricsattack.o
	@mkdir -p $(dir $@)
	$(CC) $(LINK_FLAGS) -o $@ $<

bench: all $(SIMSTOP) $(SIMISOLATION)
	$(NEED) valgrind=valgrind /usr/bin/time=time python3=python3
	@bash bench/testbed.sh
	@bash bench/shim.sh
	@bash bench/posd.sh
	@bash bench/core.sh
	@bash bench/completion.sh
	@bash bench/simstop.sh
	@bash bench/simisolation.sh
	@bash bench/simlock.sh
	@bash bench/hostcal.sh
	@bash bench/isolation.sh
	@bash bench/kube.sh

check-static: $(DEPS_STAMP) $(B)/gen/cu_errors.h $(B)/gen/cu_exports.h $(BPF_SKELS) $(KUBE_PB_H)
	$(NEED) cppcheck=cppcheck clang-tidy=clang-tidy
	@bash scripts/check-static.sh
	@$(MAKE) -s --no-print-directory all # the objects the circle check reads
	@/usr/bin/python3 scripts/circles.py $(B)

memcheck: all $(B)/tests/test_posd $(B)/tests/test_hostile $(HOSTILE)
	$(NEED) valgrind=valgrind
	@bash tests/memcheck.sh

# The fault suite's long form: 8 clients, churn and faults for SOAK_MINUTES (default 30).
SOAK_MINUTES ?= 30
soak: all $(HOSTILE)
	@SOAK_MINUTES=$(SOAK_MINUTES) bash bench/soak.sh

# Whether a stopped or SCHED_IDLE process of the simulated GPU moves the others' p99
bench-simisolation: all $(SIMISOLATION)
	@bash bench/simisolation.sh

# How long processes wait for the simulated GPU's device lock under the demo's mix
bench-simlock: all
	@bash bench/simlock.sh

# What the simulated driver adds end to end against another build's (BASELINE=DIR, a build/sim)
bench-simdevice: all
	@BASELINE=$(BASELINE) bash bench/simdevice.sh

# whether profile saves stall scheduling, against BASELINE's posd when given (docs/results/saves.md)
bench-saves: all $(SAVEGRANT)
	@BASELINE=$(BASELINE) bash bench/saves.sh

# what the host's work costs the CPU: possim's [host] defaults (docs/results/hostcal.md)
bench-hostcal: all
	@bash bench/hostcal.sh

# possim against real processes (posd + shim + posapp on the simulated driver): docs/results/e2e.md
bench-e2e: all
	@bash bench/e2e.sh

bench-e2e-host: all
	@bash bench/e2e_host.sh

bench-pos: all
	@bash bench/pos.sh

# a latency client beside steady and churning batch work, end to end and in possim
# (docs/results/isolation.md)
bench-isolation: all
	@bash bench/isolation.sh

# issue 21's Kubernetes targets on the simulated GPU: a pod, a podman container with the CDI device
# and a process side by side, posd and kubelet restarts, one ConfigMap (docs/results/kubernetes.md;
# root, podman for the container parts, python3-grpcio for the kubelet's)
bench-kube: all
	@bash bench/kube.sh
# the CPU lever on make demo's mix: off, SCHED_IDLE, nice, and static references (docs/results/cpu.md)
bench-cpu: all
	@bash bench/cpu.sh
# what the memory ledger adds to an allocation, and whether it moved the launch path
# (docs/results/memory.md; BASELINE=DIR: another build's shim for the launch path)
bench-memory: all $(B)/tests/shim_memload
	@BASELINE=$(BASELINE) bash bench/memory.sh
# kernel profiles end to end on the four presets, device times against poll times
# (docs/results/profiles.md)
bench-profiles: all
	@bash bench/profiles.sh

# scrapes and a latency client's p99 under 1,000 slow or idle metrics connections of one user
# (docs/results/reliability.md)
bench-metricsattack: all $(METRICSATTACK)
	@bash bench/metricsattack.sh

# static schedule search and its schedules followed in possim (docs/results/search.md)
bench-search: all
	@bash bench/search.sh

# pos over a grid of its co-location knobs on make demo's mix and the steady isolation mixes, in
# possim on 2 and 16 cores: the frontier, and what meets issue 19's targets (docs/results/frontier.md)
bench-frontier: all
	$(NEED) python3=python3
	@/usr/bin/python3 bench/frontier.py

# policy learned trained in possim, judged on held-out mixes against pos, DP and the others
# (docs/results/learned.md)
bench-learned: all
	@bash bench/learned.sh

# --- the real-GPU suite (docs/gpu.md) ---------------------------------------------------------
# build/gpu: posd, posstat, possim, posapp, libposshim.so and posapp's synthetic kernels, built
# to run on a GPU machine without this project's build dependencies (liburing and libinih
# linked statically; nvcc builds the fatbin and the CUDA check programs here).
gpu-build: $(DEPS_STAMP)
	@CUDA_HOME=$(CUDA_HOME) bash tests/gpu/build.sh $(B)/gpu

# The suite's whole logic against the simulated driver (about a minute).
gpu-dry-run: all gpu-build
	@CUDA_HOME=$(CUDA_HOME) bash tests/gpu/run.sh $(B)/gpu-dry-run --sim

# --- install --------------------------------------------------------------------------
# Binaries, the shim and the simulated driver, man pages, models, docs, examples (etc/), the
# systemd unit. /etc/posd/posd.conf is installed only where none is; uninstall removes it only
# while it is still the example.
MAN_PAGES := $(wildcard man/*.[1-8])
BINS := $(POSAPP) $(POSSTAT) $(POSCTL) $(POSTRACE) $(POSSIM) $(POSD) $(KUBE_PLUGIN)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pos/sim \
	    $(DESTDIR)$(PREFIX)/share/pos/models $(DESTDIR)$(PREFIX)/share/pos/possim \
	    $(DESTDIR)$(PREFIX)/share/doc/pos/policy.d $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(SHIM) $(DESTDIR)$(PREFIX)/lib/pos/libposshim.so
	install -m 0755 $(SIM_LIB) $(DESTDIR)$(PREFIX)/lib/pos/sim/libcuda.so.1
	install -m 0755 $(SIM_DEVICE) $(DESTDIR)$(PREFIX)/lib/pos/sim/pos-sim-device
	ln -sf libcuda.so.1 $(DESTDIR)$(PREFIX)/lib/pos/sim/libcuda.so
	install -m 0644 sim/models/*.model $(DESTDIR)$(PREFIX)/share/pos/models/
	install -m 0644 etc/possim/*.ini $(DESTDIR)$(PREFIX)/share/pos/possim/
	install -m 0644 README.md docs/*.md docs/*.png $(DESTDIR)$(PREFIX)/share/doc/pos/
	install -m 0644 etc/posd.conf $(DESTDIR)$(PREFIX)/share/doc/pos/posd.conf.example
	install -m 0644 etc/policy.d/*.conf $(DESTDIR)$(PREFIX)/share/doc/pos/policy.d/
	for m in $(MAN_PAGES); do s=$${m##*.}; install -d $(DESTDIR)$(PREFIX)/share/man/man$$s && \
	    install -m 0644 $$m $(DESTDIR)$(PREFIX)/share/man/man$$s/ || exit 1; done
	install -d $(DESTDIR)/etc/posd/policy.d
	[ -e $(DESTDIR)/etc/posd/posd.conf ] || install -m 0644 etc/posd.conf $(DESTDIR)/etc/posd/
	sed 's|/usr/local|$(PREFIX)|g' etc/posd.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/posd.service

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(BINS)))
	rm -rf $(DESTDIR)$(PREFIX)/lib/pos $(DESTDIR)$(PREFIX)/share/pos $(DESTDIR)$(PREFIX)/share/doc/pos
	rm -f $(foreach m,$(MAN_PAGES),$(DESTDIR)$(PREFIX)/share/man/man$(subst .,,$(suffix $(m)))/$(notdir $(m)))
	rm -f $(DESTDIR)$(PREFIX)/lib/systemd/system/posd.service
	! cmp -s etc/posd.conf $(DESTDIR)/etc/posd/posd.conf || rm -f $(DESTDIR)/etc/posd/posd.conf
	-rmdir $(DESTDIR)/etc/posd/policy.d $(DESTDIR)/etc/posd 2>/dev/null

format:
	$(NEED) clang-format=clang-format
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(B)

.PHONY: all deps-hashcat deps-timeline deps-podman test fuzz soak check-static memcheck demo bench bench-e2e bench-e2e-host bench-saves bench-hostcal bench-simlock bench-simdevice bench-simisolation bench-pos bench-isolation bench-kube bench-cpu bench-memory bench-profiles bench-search bench-frontier bench-learned bench-metricsattack gpu-build gpu-dry-run install uninstall format clean FORCE
.SECONDARY:
.DELETE_ON_ERROR:

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
