# gradmesh build.  `make` builds ./gradmesh; see README.md for the rest.
#
#   make                  build (release flags, -O3 -march=native)
#   make test             install missing Debian packages, build, run every test (JOBS=N:
#                         build with N jobs and run N fuzzers at once; default the cores)
#   make test-systemd     the README's install under systemd-nspawn machines (root)
#   make demo             three agents on loopback train LeNet-5 together (tests/demo.sh)
#   make bench            benchmarks against PyTorch (prints ratios)
#   make fuzz             build the libFuzzer targets (clang) into build-fuzz/
#   make SAN=address,undefined test      same tests under sanitizers (objects in build-san/)
#   make CUDA=auto|0|1    auto: build the CUDA backend when nvcc is found
#   make V=1              show commands
#   make format-check     clang-format conformance
#   make install          PREFIX=/usr/local DESTDIR= : binary, systemd unit, sysusers/tmpfiles
#                         snippets, man pages, bash completion, example config, README.md and
#                         the docs it links to (Debian layout with PREFIX=/usr); `make
#                         uninstall` removes them

CC ?= cc
SAN ?=
CUDA ?= auto
V ?= 0
OPT ?= -O3 -march=native -fno-math-errno
FUZZ_SECONDS ?= 10
# `make test` builds with this many jobs (and tests/run.sh runs as many fuzzers at once)
JOBS ?= $(shell nproc 2>/dev/null || echo 1)

ifeq ($(V),1)
Q :=
else
Q := @
endif

BUILD := build$(if $(SAN),-san)
PKG_CONFIG ?= pkg-config
PKGS := openblas zlib libpng libjpeg inih libuv libsodium openssl jansson libsystemd libmicrohttpd raft
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)

# --- build dependencies ----------------------------------------------------
# The Debian package that provides each pkg-config module.  A goal that compiles stops at
# once, naming what is missing and the apt-get line that installs it, instead of failing
# later on `fatal error: sodium.h`.  (`make test`, `demo` and `bench` install them first.)
DEB_openblas := libopenblas-dev
DEB_zlib := zlib1g-dev
DEB_libpng := libpng-dev
DEB_libjpeg := libjpeg-dev
DEB_inih := libinih-dev
DEB_libuv := libuv1-dev
DEB_libsodium := libsodium-dev
DEB_openssl := libssl-dev
DEB_jansson := libjansson-dev
DEB_libsystemd := libsystemd-dev
DEB_libmicrohttpd := libmicrohttpd-dev
DEB_raft := libraft-dev
NOTHING :=
# `make` alone builds the binary, whatever rule comes first below (the version stamp's).
.DEFAULT_GOAL := all

NO_DEPS_GOALS := test test-systemd demo bench deps clean format format-check uninstall print-version
ifneq ($(filter-out $(NO_DEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
  ifeq ($(shell command -v $(PKG_CONFIG) 2>/dev/null),)
    MISSING_DEBS := pkg-config $(foreach p,$(PKGS),$(DEB_$(p)))
  else
    MISSING_DEBS := $(foreach p,$(PKGS),$(if $(shell $(PKG_CONFIG) --exists $(p) && echo y),,$(DEB_$(p))))
  endif
  ifeq ($(shell command -v $(CC) 2>/dev/null),)
    MISSING_DEBS := gcc $(MISSING_DEBS)
  endif
  ifneq ($(strip $(MISSING_DEBS)),)
    $(info gradmesh: missing build dependencies (Debian packages): $(strip $(MISSING_DEBS)))
    $(info install them (as root) with:)
    $(info $(NOTHING)  apt-get install $(strip $(MISSING_DEBS)))
    $(info or run `make deps` as root (it installs what the tests need as well).)
    $(error missing build dependencies)
  endif
endif

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
	-Wformat=2 -Wimplicit-fallthrough
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE -I. $(PKG_CFLAGS) $(WARN) $(OPT) -g -MMD -MP -pthread $(CFLAGS)
LDLIBS_ALL := $(PKG_LIBS) -lm -pthread $(LDLIBS)

ifneq ($(SAN),)
CFLAGS_ALL += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif

# --- CUDA ------------------------------------------------------------------
NVCC_FOUND := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CUDA),auto)
  ifneq ($(NVCC_FOUND),)
    USE_CUDA := 1
  else
    USE_CUDA := 0
  endif
else ifeq ($(CUDA),1)
  ifeq ($(NVCC_FOUND),)
    $(error CUDA=1 but nvcc was not found (PATH or /usr/local/cuda/bin))
  endif
  USE_CUDA := 1
else
  USE_CUDA := 0
endif
# Sanitized builds stay CPU-only: nvcc objects and ASan do not mix well.
ifneq ($(SAN),)
  USE_CUDA := 0
endif

CU_SRCS := $(wildcard train/kernels/*.cu)
# Nothing to build until the tree has CUDA kernels (train/kernels/*.cu).
ifeq ($(CU_SRCS),)
  ifeq ($(USE_CUDA),1)
    CUDA_REASON := nvcc found, but no CUDA kernels in this tree
  endif
  USE_CUDA := 0
endif
# The CUDA build: nvcc compiles the kernels (train/kernels/*.cu); gcc compiles the C files that
# call the CUDA runtime, cuBLAS and cuDNN (their APIs are C), with -DGM_HAVE_CUDA=1.  The runtime
# is linked statically (cudart_static): it dlopen()s the driver (libcuda.so.1) at the first call,
# so the same binary starts and trains on the CPU on a machine without a driver or a GPU.
# cuBLAS and cuDNN are not linked: train/kernels/cuda_libs.c dlopen()s them the first time a
# CUDA device is chosen, from $(CUDA_HOME)/lib64 (GM_CUDA_LIBDIR), then the loader's default
# path, so `gradmesh --version` and CPU training never map them and the binary starts where
# they are absent.  CUDA 13 builds for Turing (sm_75) and newer: machine code for each CUDA_ARCHS entry
# plus PTX for the oldest, which the driver compiles for GPUs newer than the list.
CUDA_ARCHS ?= 75 80 86 89 90 120
ifeq ($(USE_CUDA),1)
  CUDA_HOME := $(patsubst %/bin/nvcc,%,$(NVCC_FOUND))
  CFLAGS_ALL += -DGM_HAVE_CUDA=1 -isystem $(CUDA_HOME)/include \
	-DGM_CUDA_LIBDIR=\"$(CUDA_HOME)/lib64\"
  LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
  CU_OBJS := $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
  CUDA_NOTE := CUDA backend: on ($(NVCC_FOUND), sm $(CUDA_ARCHS))
else
  CU_OBJS :=
  CUDA_NOTE := CUDA backend: off$(if $(CUDA_REASON), ($(CUDA_REASON)))
endif
# Warnings are errors in nvcc and in the host compiler it drives.  -fmad=false: no fused
# multiply-add contraction, so the optimizer kernels round exactly like the CPU's (gcc at
# -std=c11 does not contract either) and every rank's parameters stay bitwise identical.
NVCC_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	-gencode arch=compute_$(firstword $(CUDA_ARCHS)),code=compute_$(firstword $(CUDA_ARCHS))
NVCCFLAGS ?= -O3 -std=c++17 -I. -fmad=false -Werror all-warnings \
	-Xcompiler -Wall,-Wextra,-Werror,-Wshadow,-fPIC $(NVCC_GENCODE)

# Objects depend on the flags they were built with: switching CUDA (or CFLAGS, OPT) rebuilds
# them instead of linking objects compiled with and without -DGM_HAVE_CUDA together.
FLAGS_STAMP := $(BUILD)/.flags
ifneq ($(filter-out $(NO_DEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
  FLAGS_NOW := $(CC) $(CFLAGS_ALL) | $(NVCCFLAGS) | $(LDLIBS_ALL)
  ifneq ($(FLAGS_NOW),$(shell cat $(FLAGS_STAMP) 2>/dev/null))
    $(shell mkdir -p $(BUILD) && printf '%s\n' '$(FLAGS_NOW)' > $(FLAGS_STAMP))
  endif
endif

# --- version ---------------------------------------------------------------
# `gradmesh version`, gradmesh_build_info and the HELLO carry these (agent/service/version.h).
# In a git tree: `git describe --tags --dirty` (a tag v1.2.0 gives "1.2.0"; with no tag
# "$(GM_VERSION_BASE)-dev+g<commit>"); in a release tarball (`git archive`, no .git): the
# VERSION file that export-subst filled in; else "$(GM_VERSION_BASE)+unknown".  Only
# version.o is rebuilt when they change (the stamp file holds the last values).
GM_VERSION_BASE := 0.1.0
GIT_DIR_OK := $(shell git rev-parse --git-dir >/dev/null 2>&1 && echo y)
ifeq ($(GIT_DIR_OK),y)
  GM_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
  GM_VERSION := $(patsubst v%,%,$(shell git describe --tags --dirty --match 'v[0-9]*' 2>/dev/null))
  ifeq ($(GM_VERSION),)
    GM_VERSION := $(GM_VERSION_BASE)-dev+g$(shell git rev-parse --short HEAD 2>/dev/null)$(if $(shell git status --porcelain --untracked-files=no 2>/dev/null),.dirty)
  endif
else
  # "COMMIT [TAG-DESCRIPTION]" (git archive fills it in; an untagged commit has no second word)
  VERSION_FILE := $(if $(wildcard VERSION),$(shell grep -v '\$$Format' VERSION 2>/dev/null))
  GM_COMMIT := $(or $(word 1,$(VERSION_FILE)),unknown)
  GM_VERSION := $(or $(patsubst v%,%,$(word 2,$(VERSION_FILE))),$(if $(VERSION_FILE),$(GM_VERSION_BASE)-dev+g$(shell echo $(GM_COMMIT) | cut -c1-7),$(GM_VERSION_BASE)+unknown))
endif
VERSION_STAMP := $(BUILD)/.version
ifneq ($(filter-out $(NO_DEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
  ifneq ($(GM_VERSION) $(GM_COMMIT),$(shell cat $(VERSION_STAMP) 2>/dev/null))
    $(shell mkdir -p $(BUILD) && printf '%s\n' '$(GM_VERSION) $(GM_COMMIT)' > $(VERSION_STAMP))
  endif
endif
$(BUILD)/agent/service/version.o: $(VERSION_STAMP)
# "VERSION COMMIT", as the binary will say them (tests/integration/version.sh)
print-version:
	@echo '$(GM_VERSION) $(GM_COMMIT)'

$(BUILD)/agent/service/version.o: CFLAGS_ALL += -DGM_BUILD_VERSION='"$(GM_VERSION)"' \
	-DGM_BUILD_COMMIT='"$(GM_COMMIT)"'

# --- sources ---------------------------------------------------------------
MAIN_SRC := agent/cli/main.c
# train/*/*.c: train's sub-folders (nn, kernels, data, comm, compress, ckpt); agent/*/*.c: the
# agent's rooms (net, service, core, mesh, cluster, jobs, cli; docs/ARCHITECTURE.md)
LIB_SRCS := $(filter-out $(MAIN_SRC),$(wildcard common/*.c crypto/*.c discovery/*.c train/*.c \
	train/*/*.c agent/*.c agent/*/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CU_OBJS)
LIB := $(BUILD)/libgradmesh.a
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
# test tools (tests/tools/X.c -> $(BUILD)/tools/X): standalone programs the integration tests
# and benchmarks run (udp_delay: the namespace testbed's latency)
TOOL_SRCS := $(wildcard tests/tools/*.c)
TOOL_BINS := $(TOOL_SRCS:tests/tools/%.c=$(BUILD)/tools/%)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/%)
BIN := gradmesh$(if $(SAN),-san)

.PHONY: print-version all tools test test-systemd unit demo bench fuzz deps clean format format-check cuda-note install uninstall
all: $(BIN) cuda-note

cuda-note:
	@echo "$(CUDA_NOTE)"

$(BIN): $(BUILD)/agent/cli/main.o $(LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(LIB): $(LIB_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -c -o $@ $<

$(BUILD)/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC_FOUND) $(NVCCFLAGS) -DGM_HAVE_CUDA=1 -MMD -MP -MF $(@:.o=.d) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIB) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS_ALL)

# bench/models_vs_torch.py's gradmesh side, with this build's backends (the GPU bundle's
# copy times steps on a GPU)
$(BUILD)/bench/model_step: bench/model_step.c $(LIB) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS_ALL)

$(BUILD)/tools/%: tests/tools/%.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $<

tools: $(TOOL_BINS)

# Installs missing Debian packages as root, or prints the apt-get line.
deps:
	$(Q)bash .ci/deps.sh

unit: $(BIN) $(TEST_BINS) $(TOOL_BINS)

# Everything CI runs.  tests/run.sh prints "N passed, N failed, N skipped".
test: deps
	$(Q)$(MAKE) --no-print-directory -j$(JOBS) unit
	$(Q)GM_BIN=./$(BIN) GM_BUILD=$(BUILD) GM_SAN="$(SAN)" FUZZ_SECONDS=$(FUZZ_SECONDS) \
		FUZZ_JOBS=$(JOBS) bash tests/run.sh $(TEST_BINS)

# The README's install under a real systemd: two machines booted with systemd-nspawn run its
# block as written, then a 2-agent job (tests/systemd/boot.sh; root; the first run builds a
# Debian root with debootstrap, later ones reuse it).  Not in `make test`: it needs root,
# the network once and ~500 MB; .ci/run runs it after `make test`.
test-systemd:
	$(Q)bash .ci/deps.sh systemd
	$(Q)bash tests/systemd/boot.sh

demo: deps
	$(Q)$(MAKE) --no-print-directory $(BIN)
	$(Q)bash tests/demo.sh ./$(BIN)

bench: deps
	$(Q)$(MAKE) --no-print-directory $(BIN) tools
	$(Q)bash bench/run.sh ./$(BIN)

# --- fuzzers (clang + libFuzzer + ASan/UBSan), every lib source rebuilt -----
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -I. $(PKG_CFLAGS) -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
FUZZ_OBJS := $(filter-out build-fuzz/train/kernels/%.cu.o,$(LIB_SRCS:%.c=build-fuzz/%.o))

build-fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CLANG   $<"
	$(Q)clang $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJS)
	@echo "  FUZZ    $@"
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lm -pthread

fuzz: $(FUZZ_BINS)

# keep the fuzz objects between runs (make would delete them as intermediates)
.SECONDARY: $(FUZZ_OBJS)

# --- install (a Debian package would use PREFIX=/usr) ----------------------
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/gradmesh
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
COMPLETIONDIR ?= $(PREFIX)/share/bash-completion/completions
MAN_PAGES := docs/man/gradmesh.1 docs/man/gradmesh.conf.5 docs/man/gradmesh-job.5
INSTALL ?= install

install: $(BIN)
	$(INSTALL) -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/gradmesh
	$(INSTALL) -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed 's#@BINDIR@#$(BINDIR)#g' systemd/gradmesh@.service > $(DESTDIR)$(UNITDIR)/gradmesh@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/gradmesh@.service
	$(INSTALL) -D -m 0644 systemd/gradmesh.sysusers $(DESTDIR)$(SYSUSERSDIR)/gradmesh.conf
	$(INSTALL) -D -m 0644 systemd/gradmesh.tmpfiles $(DESTDIR)$(TMPFILESDIR)/gradmesh.conf
	$(INSTALL) -D -m 0644 docs/man/gradmesh.1 $(DESTDIR)$(MANDIR)/man1/gradmesh.1
	$(INSTALL) -D -m 0644 docs/man/gradmesh.conf.5 $(DESTDIR)$(MANDIR)/man5/gradmesh.conf.5
	$(INSTALL) -D -m 0644 docs/man/gradmesh-job.5 $(DESTDIR)$(MANDIR)/man5/gradmesh-job.5
	$(INSTALL) -D -m 0644 completion/gradmesh $(DESTDIR)$(COMPLETIONDIR)/gradmesh
	$(INSTALL) -D -m 0644 docs/examples/gradmesh.conf $(DESTDIR)$(DOCDIR)/examples/gradmesh.conf
	$(INSTALL) -m 0644 docs/jobs/*.ini $(DESTDIR)$(DOCDIR)/examples/
	$(INSTALL) -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	# the documents README.md links to (docs/NAME.md), where its links point
	$(INSTALL) -d -m 0755 $(DESTDIR)$(DOCDIR)/docs
	$(INSTALL) -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/gradmesh $(DESTDIR)$(UNITDIR)/gradmesh@.service \
		$(DESTDIR)$(SYSUSERSDIR)/gradmesh.conf $(DESTDIR)$(TMPFILESDIR)/gradmesh.conf \
		$(DESTDIR)$(MANDIR)/man1/gradmesh.1 $(DESTDIR)$(MANDIR)/man5/gradmesh.conf.5 \
		$(DESTDIR)$(MANDIR)/man5/gradmesh-job.5 $(DESTDIR)$(COMPLETIONDIR)/gradmesh
	rm -rf $(DESTDIR)$(DOCDIR)

format:
	$(Q)clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	$(Q)clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-san build-fuzz gradmesh gradmesh-san

-include $(shell find $(sort build build-san build-fuzz $(BUILD)) -name '*.d' 2>/dev/null)
