# kvtier, a plain Makefile. `make help` lists the targets.

BUILD	?= build
CC	?= cc
OPT	?= -O2
SAN	?=
PKGS	 = liburing numa inih libxxhash openblas libutf8proc libzstd
# Debian packages behind $(PKGS) and the tools the tests and benchmarks use
# (gnuplot: kvt-sim mrc --plot; python3: the Python package's tests;
# optional, so deps-check does not ask for them).
DEB_PKGS = build-essential pkg-config liburing-dev libnuma-dev libinih-dev \
	   libxxhash-dev libopenblas-dev libutf8proc-dev libzstd-dev fio gnuplot-nox python3

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CFLAGS	?= $(OPT) -g
CFLAGS	+= -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -fPIC \
	   -fvisibility=hidden -pthread -Iinclude -I. $(PKG_CFLAGS)
ifneq ($(SAN),)
# A sanitizer report stops the test (no recovering after undefined
# behaviour), so it cannot pass with one in its log.
SAN_RECOVER = $(if $(filter thread,$(SAN)),,-fno-sanitize-recover=all)
CFLAGS	+= -fsanitize=$(SAN) $(SAN_RECOVER) -fno-omit-frame-pointer -DKVT_DEBUG=1
LDFLAGS	+= -fsanitize=$(SAN) $(SAN_RECOVER)
endif
LDLIBS	+= $(PKG_LIBS) -lm -pthread -ldl
# FAULTS=1: the library takes the fault.* keys (NVMe fault injection,
# docs/config.md); the sanitizer builds (asan, tsan, soak) turn it on.
FAULTS	?= $(if $(SAN),1,0)
ifeq ($(FAULTS),1)
CFLAGS	+= -DKVT_FAULTS=1
endif

GEN	 = $(BUILD)/gen
# The one version, from include/kvt/version.h: libkvt.so.$(VERSION), whose
# soname is libkvt.so.$(VERSION_MAJOR); kvt.pc and the man pages say it.
VERSION	      := $(shell sed -n 's/^\#define KVT_VERSION_STRING[[:space:]]*"\(.*\)"$$/\1/p' \
			 include/kvt/version.h)
VERSION_MAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME	       = libkvt.so.$(VERSION_MAJOR)
CFLAGS	+= -I$(GEN)
# libkvt, layer by layer (docs/architecture.md): the pager core, the
# operator layer above it (ops/: control socket, metrics endpoint,
# memory-pressure watcher; it uses the core through include/kvt/ and
# pager/hooks.h only, and tests/t_layers.sh keeps it so), the devices,
# the runtime.
CORE_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard pager/*.c pager/policy/*.c))
OPS_OBJ	 = $(patsubst %.c,$(BUILD)/%.o,$(wildcard ops/*.c))
DEV_OBJ	 = $(patsubst %.c,$(BUILD)/%.o,$(wildcard kernels/*.c kernels/cpu/*.c))
RT_OBJ	 = $(patsubst %.c,$(BUILD)/%.o,$(wildcard runtime/*.c))
LIB_OBJ	 = $(CORE_OBJ) $(OPS_OBJ) $(DEV_OBJ) $(RT_OBJ)
TOOLS	 = $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/kvt-*.c)) $(BUILD)/kvtctl
TEST_SRC = $(wildcard tests/t_*.c)
# Test scripts run from the source tree, as they are.
TEST_SH	 = tests/t_layers.sh tests/t_install.sh
TESTS	 = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%) $(TEST_SH)
# The Python package's tests (python/tests) over build/libkvt.so; not in
# the sanitizer suites: a plain python3 cannot load a sanitized library.
ifeq ($(SAN),)
TESTS	+= tests/t_python.sh
endif
TEST_COMMON = $(BUILD)/tests/common.o

# Keep the objects of tests and tools: they are not throwaway intermediates.
.SECONDARY:

# The CUDA plug-in (kernels/cuda/): built when nvcc is found, on the PATH
# or under CUDA_HOME; `make CUDA=0` skips it. libkvt and the tools never
# link CUDA: kvt_device_open("cuda"|"auto") loads build/libkvt-cuda.so.
CUDA_HOME ?= $(or $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
NVCC	  ?= $(CUDA_HOME)/bin/nvcc
CUDA	  ?= $(if $(wildcard $(NVCC)),1,0)
# Machine code for sm_80 (A100) and sm_90 (H100, H200), the GPUs a long
# context is served on, so they start without a JIT pause; PTX for
# compute_90, so that newer GPUs can JIT it.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	     -gencode arch=compute_90,code=compute_90
# CI sets CUDA_WERROR=1: the plug-in is compiled and linked with warnings
# as errors on every run, though no GPU is there to run it.
NVCC_WERROR = $(if $(filter 1,$(CUDA_WERROR)),-Werror all-warnings -Xcompiler -Werror)
CC_WERROR   = $(if $(filter 1,$(CUDA_WERROR)),-Werror)
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra \
	     $(NVCC_WERROR) -Iinclude -I.
CUDA_PLUGIN = $(BUILD)/libkvt-cuda.so
CUDA_OBJ  = $(BUILD)/kernels/cuda/kernels.o $(BUILD)/kernels/cuda/cuda_device.o \
	    $(BUILD)/kernels/cuda/cuda_compute.o $(BUILD)/kernels/cpu/quants.o
ifeq ($(CUDA),1)
PLUGINS_GPU = $(CUDA_PLUGIN)
endif

.PHONY: all lib tools tests test run bench xcheck asan tsan deps deps-check clean help cuda avx2-only \
	device-bundle soak soak-asan soak-tsan man install uninstall FORCE \
	fuzz fuzz-ci fuzz-build fuzz-targets

# all: the library (static and shared), the tools, their man pages, and the CUDA plug-in where nvcc is
all: lib tools man $(PLUGINS_GPU)

# cuda: the CUDA plug-in alone (needs nvcc), and copy-probe, which
# measures ways of moving pages to and from a GPU (docs/benchmarks.md)
cuda: $(CUDA_PLUGIN) $(BUILD)/copy-probe

$(BUILD)/copy-probe: kernels/cuda/copy-probe.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra $(NVCC_WERROR) -o $@ $<

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu kernels/cuda/kernels.h Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.c | $(GEN)/policies.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CC_WERROR) -I$(CUDA_HOME)/include -MMD -MP -c $< -o $@

# Self-contained (--no-undefined): it calls nothing in libkvt.
$(CUDA_PLUGIN): $(CUDA_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,--no-undefined -o $@ $^ -L$(CUDA_HOME)/lib64 \
		-Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++ -lm -pthread $(CC_WERROR)

# The tests' emulated GPU (tests/emu_backend.c): a backend plug-in whose
# device memory the host cannot touch and whose kernels run late, on the
# cpu kernels linked into it.
EMU_PLUGIN = $(BUILD)/libkvt-emu.so
$(EMU_PLUGIN): $(BUILD)/tests/emu_backend.o $(BUILD)/kernels/cpu/kernels.o \
	       $(BUILD)/kernels/cpu/pool.o $(BUILD)/kernels/cpu/quants.o \
	       $(BUILD)/kernels/cpu/qdots.o $(BUILD)/kernels/cpu/amx.o
	$(CC) -shared $(LDFLAGS) -Wl,--no-undefined -o $@ $^ $(LDLIBS)

lib: $(BUILD)/libkvt.a $(BUILD)/libkvt.so $(BUILD)/$(SONAME)

tools: $(TOOLS)

# Policy plug-ins for t_plugin: the example of docs/policies.md, and copies
# the loader must refuse (no symbol, a NULL method, a built-in's name, the
# example's name from another file, another policy ABI, no ABI at all).
PLUGINS = $(addprefix $(BUILD)/plugins/,example.so nosym.so novictims.so builtin.so twin.so \
	    nextabi.so noabi.so)
PLUGIN_DEFS_nosym     = -DEXAMPLE_NAME='"layerlru"' -DEXAMPLE_SYMBOL=kvt_policy_elsewhere \
			-DEXAMPLE_VICTIMS=ll_victims
PLUGIN_DEFS_novictims = -DEXAMPLE_NAME='"layerlru"' -DEXAMPLE_SYMBOL=kvt_policy \
			-DEXAMPLE_VICTIMS=NULL -Wno-unused-function
PLUGIN_DEFS_builtin   = -DEXAMPLE_NAME='"lru"' -DEXAMPLE_SYMBOL=kvt_policy \
			-DEXAMPLE_VICTIMS=ll_victims
PLUGIN_DEFS_nextabi   = -DEXAMPLE_ABI='(KVT_POLICY_ABI + 1)'
PLUGIN_DEFS_noabi     = -DEXAMPLE_ABI=0
$(BUILD)/plugins/%.so: docs/examples/policy_example.c pager/policy.h pager/policy/helpers.h \
		       pager/policy/list.h Makefile | $(GEN)/policies.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PLUGIN_DEFS_$*) -shared $(LDFLAGS) -o $@ $<

# Backend plug-ins the loader must refuse or report (t_backend).
FAKE_BACKENDS = $(foreach f,abi name nodev nokernels,$(BUILD)/fake/$(f)/libkvt-cuda.so)
$(BUILD)/fake/%/libkvt-cuda.so: tests/fake_backend.c kernels/plugin.h kernels/device.h Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DFAKE=FAKE_$(shell echo $* | tr a-z A-Z) -shared $(LDFLAGS) -o $@ $<

tests: $(TESTS) $(PLUGINS) $(EMU_PLUGIN) $(FAKE_BACKENDS)

$(BUILD)/%.o: %.c | $(GEN)/policies.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The policy registry: one line per file under pager/policy/ that defines a
# policy table, so a new policy needs no edit anywhere else.
POLICY_SRC = $(wildcard pager/policy/*.c)
$(GEN)/policies.h: $(POLICY_SRC) Makefile
	@mkdir -p $(dir $@)
	@sed -n 's/^const struct kvt_policy_ops \(kvt_policy_[a-z0-9_]*\) = {$$/KVT_POLICY(\1)/p' \
		$(POLICY_SRC) > $@.tmp && mv $@.tmp $@

# The compute kernels are the hot loops of the forward pass.
$(BUILD)/kernels/cpu/%.o: OPT = -O3

$(BUILD)/libkvt.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# The shared library is libkvt.so.MAJOR.MINOR.PATCH, with the soname
# libkvt.so.MAJOR that programs record, and the link libkvt.so that -lkvt
# finds; the same links are installed.
$(BUILD)/libkvt.so.$(VERSION): $(LIB_OBJ) libkvt.map
	$(CC) -shared -Wl,--version-script=libkvt.map -Wl,-soname,$(SONAME) \
		$(LDFLAGS) -o $@ $(LIB_OBJ) $(LDLIBS)

$(BUILD)/$(SONAME): $(BUILD)/libkvt.so.$(VERSION)
	ln -sf $(notdir $<) $@

$(BUILD)/libkvt.so: $(BUILD)/$(SONAME)
	ln -sf $(notdir $<) $@

# What the build holds, for kvt_version's neighbours (pager/version.c):
# rewritten only when it changes, so an unchanged tree rebuilds nothing,
# and kept when git cannot tell (`sudo make install` in a user's checkout:
# git refuses another user's tree), so that install relinks nothing.
GIT_DESCRIBE := $(shell git describe --always --dirty 2>/dev/null)
$(GEN)/buildinfo.h: FORCE
	@mkdir -p $(dir $@)
	@printf '#define KVT_BUILD_GIT "%s"\n#define KVT_BUILD_CUDA %s\n' \
		'$(GIT_DESCRIBE)' '$(CUDA)' > $@.tmp
	@if cmp -s $@.tmp $@ || { [ -z '$(GIT_DESCRIBE)' ] && [ -f $@ ]; }; then \
		rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/pager/version.o: $(GEN)/buildinfo.h
FORCE:

BENCH_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/bench_*.c))
CLI_OBJ	  = $(BUILD)/tools/cli.o

$(BUILD)/kvt-bench: $(BUILD)/tools/kvt-bench.o $(BENCH_OBJ) $(CLI_OBJ) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kvt-%: $(BUILD)/tools/kvt-%.o $(CLI_OBJ) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The control socket's client; its name has no dash, so TOOLS lists it by hand.
$(BUILD)/kvtctl: $(BUILD)/tools/kvtctl.o $(CLI_OBJ) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/t_%: $(BUILD)/tests/t_%.o $(TEST_COMMON) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# deps: install the Debian packages that are missing (root only)
deps:
	@missing=""; for p in $(DEB_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' \
			|| missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "deps: all installed"; exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "deps: missing:$$missing; run 'make deps' as root" >&2; exit 1; fi; \
	echo "deps: installing$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing

deps-check:
	@pkg-config --exists $(PKGS) 2>/dev/null && command -v fio >/dev/null \
		|| $(MAKE) --no-print-directory deps

# test: build everything and run the suite (closing line: N passed, N failed, N skipped)
test: deps-check
	@$(MAKE) --no-print-directory all tests
	@BUILD=$(BUILD) KVT_MAKE_VARS='SAN=$(SAN) CUDA=$(CUDA) OPT=$(OPT)' tests/run.sh $(TESTS)

# run: the main job on embedded defaults: kvt-run on a synthetic model (made
# once) with the project's docs as a long prompt; KV 8x the fast tier
RUN_MODEL ?= $(BUILD)/kvt-synth-8x512-32k.gguf
RUN_FLAGS ?= -n 128 --fast 16M --host 32M
RUN_PROMPT = $(BUILD)/run-prompt.txt
run: deps-check
	@[ -x $(BUILD)/kvt-run ] || echo "building libkvt and the tools..."
	@$(MAKE) --no-print-directory -s tools
	@[ -f $(RUN_MODEL) ] || { echo "writing a synthetic model to $(RUN_MODEL)"; \
		$(BUILD)/kvt-mkmodel --layers 8 --dim 512 --heads 8 --kv-heads 4 --ff 1536 \
			--ctx 32768 --type f16 -o $(RUN_MODEL); }
	@cat README.md docs/architecture.md docs/config.md | head -c 26000 > $(RUN_PROMPT)
	$(BUILD)/kvt-run -m $(RUN_MODEL) -f $(RUN_PROMPT) $(RUN_FLAGS)

# device-bundle: a folder to carry to a GPU machine that has CUDA but no
# Debian packages: the sources, the static libraries and headers of every
# dependency, and tools/device-check; there, build/device-bundle/device-check
# builds it all and runs every check that needs a GPU (docs/benchmarks.md)
BUNDLE	  = $(BUILD)/device-bundle
LIBDIR	  = /usr/lib/x86_64-linux-gnu
BUNDLE_H  = /usr/include/liburing.h /usr/include/liburing /usr/include/numa.h \
	    /usr/include/numaif.h /usr/include/ini.h /usr/include/xxhash.h /usr/include/xxh3.h \
	    /usr/include/utf8proc.h /usr/include/zstd.h /usr/include/zstd_errors.h \
	    $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread/*.h)
BUNDLE_A  = $(LIBDIR)/liburing.a $(LIBDIR)/libnuma.a $(LIBDIR)/libinih.a $(LIBDIR)/libxxhash.a \
	    $(LIBDIR)/libutf8proc.a $(LIBDIR)/libzstd.a
device-bundle: deps-check
	@rm -rf $(BUNDLE) && mkdir -p $(BUNDLE)/deps/include $(BUNDLE)/deps/lib
	@{ git ls-files; git ls-files --others --exclude-standard; } | sort -u | \
		while read -r f; do [ -f "$$f" ] && echo "$$f"; done | tar -czf $(BUNDLE)/src.tar.gz -T -
	@cp -r $(BUNDLE_H) $(BUNDLE)/deps/include/
	@cp $(BUNDLE_A) $(BUNDLE)/deps/lib/
	@gzip -c $(LIBDIR)/openblas-pthread/libopenblas.a > $(BUNDLE)/deps/lib/libopenblas.a.gz
	@cp tools/device-check $(BUNDLE)/
	@echo "device-bundle: $(BUNDLE) ($$(du -sh $(BUNDLE) | cut -f1)); run $(BUNDLE)/device-check there"

# bench: every kvt-bench measurement, human tables
bench: deps-check
	@$(MAKE) --no-print-directory -s tools
	$(BUILD)/kvt-bench all

# xcheck: kvt-run's logits against llama.cpp's (npm's node-llama-cpp), by hand
xcheck: deps-check
	@$(MAKE) --no-print-directory -s tools
	@BUILD=$(BUILD) tools/xcheck/run.sh

# avx2-only: the kernel suites on an emulated cpu with AVX2 and no AVX-512
# (QEMU user mode; needs Debian's qemu-user, else it skips)
avx2-only: deps-check
	@$(MAKE) --no-print-directory $(BUILD)/tests/t_quants $(BUILD)/tests/t_kernels
	@BUILD=$(BUILD) tests/avx2-only.sh; rc=$$?; [ $$rc = 0 ] || [ $$rc = 77 ]

# The kernels run OpenBLAS on one thread (the pool supplies the parallelism);
# under the sanitizers its idle start-up threads spin long enough to trip
# t_nospin's CPU check, so they are not started there.
SAN_ENV = KVT_TEST_SCALE=4 OPENBLAS_NUM_THREADS=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ASAN_OPTIONS=halt_on_error=1

# asan: the suite under AddressSanitizer and UBSan (without the CUDA
# plug-in: its tests skip there)
asan: deps-check
	@$(SAN_ENV) $(MAKE) --no-print-directory BUILD=build/asan SAN=address,undefined OPT=-O1 CUDA=0 test

# tsan: the suite under ThreadSanitizer (without the CUDA plug-in)
tsan: deps-check
	@$(SAN_ENV) $(MAKE) --no-print-directory BUILD=build/tsan SAN=thread OPT=-O1 CUDA=0 test

# soak: the fault soak (tests/t_soak.c) for SOAK_SECONDS under ASan, then
# under TSan (soak-asan or soak-tsan: one of them; make -j2 soak: both at
# once); each log, build/{asan,tsan}/soak.log, ends with the figures
# (docs/reliability.md)
SOAK_SECONDS ?= 600
comma := ,
soak: soak-asan soak-tsan

soak-asan soak-tsan: soak-%: deps-check
	@$(SAN_ENV) $(MAKE) --no-print-directory BUILD=build/$* OPT=-O1 CUDA=0 \
		SAN=$(if $(filter asan,$*),address$(comma)undefined,thread) build/$*/tests/t_soak
	@echo "soak-$*: $(SOAK_SECONDS) s, log in build/$*/soak.log"
	@$(SAN_ENV) KVT_SOAK_SECONDS=$(SOAK_SECONDS) build/$*/tests/t_soak \
		>build/$*/soak.log 2>&1; rc=$$?; tail -n 1 build/$*/soak.log; \
	if grep -qE 'runtime error:|ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer' \
		build/$*/soak.log; then echo "soak-$*: sanitizer report in the log"; exit 1; fi; \
	[ $$rc -eq 0 ] || { echo "soak-$*: exit $$rc"; exit 1; }

# Man pages, written at build time from each tool's --help by tools/mkman
# (help2man's idea in a page of shell), so that they say what the tool
# says. The NAME line of each (no single quotes: the recipe quotes it
# with them):
MAN_NAME_kvt-run     = run a GGUF model with its KV cache paged across GPU, host RAM and NVMe
MAN_NAME_kvtctl	     = ask a running kvtier pager for its stats, change its settings, trace it
MAN_NAME_kvt-sim     = replay KV page traces against tiers and eviction policies
MAN_NAME_kvt-trace   = inspect, import and export kvtier traces
MAN_NAME_kvt-bench   = measure the tiers, copies, attention and inference of kvtier
MAN_NAME_kvt-mkmodel = write a synthetic GGUF model for tests and benchmarks
MAN_NAME_kvt-demo    = serve a long context from a small fast tier and show each step
MANS = $(TOOLS:$(BUILD)/%=$(BUILD)/man/%.1)
$(BUILD)/man/%.1: $(BUILD)/% tools/mkman
	@mkdir -p $(dir $@)
	tools/mkman $< '$(MAN_NAME_$*)' 'kvtier $(VERSION)' > $@.tmp && mv $@.tmp $@

# man: the tools' man pages (build/man/*.1)
man: $(MANS)

# The installed tree, GNU style under PREFIX; DESTDIR, when given, is
# prepended to each path (a staging folder for a package).
PREFIX	   ?= /usr/local
bindir	    = $(PREFIX)/bin
libdir	    = $(PREFIX)/lib
includedir  = $(PREFIX)/include
mandir	    = $(PREFIX)/share/man
pkgconfigdir = $(libdir)/pkgconfig
# The backend and policy plug-ins: kernels/device.c looks in ../lib/kvt/
# from the program's folder (and in kvt/ from libkvt.so's).
plugindir   = $(libdir)/kvt
INSTALL	   ?= install

# The headers a program includes (<kvt/pager.h>), and under kvt/plugin/
# those a policy plug-in includes ("pager/policy.h"; kvt.pc puts that
# folder on the include path).
PUB_H	   = $(wildcard include/kvt/*.h)
POLICY_H   = $(wildcard pager/policy/*.h)
INSTALLED  = $(addprefix $(includedir)/kvt/,$(notdir $(PUB_H))) \
	     $(includedir)/kvt/plugin/pager/policy.h $(includedir)/kvt/plugin/pager/policies.h \
	     $(includedir)/kvt/plugin/pager/errf.h \
	     $(addprefix $(includedir)/kvt/plugin/pager/policy/,$(notdir $(POLICY_H))) \
	     $(libdir)/libkvt.a $(libdir)/libkvt.so.$(VERSION) $(libdir)/$(SONAME) \
	     $(libdir)/libkvt.so $(pkgconfigdir)/kvt.pc \
	     $(TOOLS:$(BUILD)/%=$(bindir)/%) $(MANS:$(BUILD)/man/%=$(mandir)/man1/%) \
	     $(plugindir)/layerlru.so $(plugindir)/libkvt-cuda.so
# The folders install makes, deepest first: uninstall removes those left empty.
INSTALLED_DIRS = $(includedir)/kvt/plugin/pager/policy $(includedir)/kvt/plugin/pager \
		 $(includedir)/kvt/plugin $(includedir)/kvt $(plugindir)

$(BUILD)/kvt.pc: libkvt.pc.in include/kvt/version.h Makefile FORCE
	@sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
		-e 's|@REQUIRES@|$(PKGS)|' $< > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

# install: the library, headers, kvt.pc, tools, man pages and plug-ins
# under PREFIX (/usr/local), staged in DESTDIR if given
install: all $(BUILD)/kvt.pc $(BUILD)/plugins/example.so
	$(INSTALL) -d $(DESTDIR)$(includedir)/kvt/plugin/pager/policy $(DESTDIR)$(libdir) \
		$(DESTDIR)$(pkgconfigdir) $(DESTDIR)$(bindir) $(DESTDIR)$(mandir)/man1 \
		$(DESTDIR)$(plugindir)
	$(INSTALL) -m 644 $(PUB_H) $(DESTDIR)$(includedir)/kvt/
	$(INSTALL) -m 644 pager/policy.h pager/errf.h $(GEN)/policies.h $(DESTDIR)$(includedir)/kvt/plugin/pager/
	$(INSTALL) -m 644 $(POLICY_H) $(DESTDIR)$(includedir)/kvt/plugin/pager/policy/
	$(INSTALL) -m 644 $(BUILD)/libkvt.a $(DESTDIR)$(libdir)/
	$(INSTALL) -m 755 $(BUILD)/libkvt.so.$(VERSION) $(DESTDIR)$(libdir)/
	ln -sf libkvt.so.$(VERSION) $(DESTDIR)$(libdir)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(libdir)/libkvt.so
	$(INSTALL) -m 644 $(BUILD)/kvt.pc $(DESTDIR)$(pkgconfigdir)/
	$(INSTALL) -m 755 $(TOOLS) $(DESTDIR)$(bindir)/
	$(INSTALL) -m 644 $(MANS) $(DESTDIR)$(mandir)/man1/
	$(INSTALL) -m 755 $(BUILD)/plugins/example.so $(DESTDIR)$(plugindir)/layerlru.so
	$(if $(PLUGINS_GPU),$(INSTALL) -m 755 $(PLUGINS_GPU) $(DESTDIR)$(plugindir)/)

# uninstall: remove what install put under PREFIX (and DESTDIR), and the
# folders of its own it leaves empty
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	@rmdir $(addprefix $(DESTDIR),$(INSTALLED_DIRS)) 2>/dev/null || true

# Fuzzing (tests/fuzz/README.md, docs/reliability.md): libFuzzer targets
# built by clang with ASan and UBSan over the library's sources, compiled
# the same way, in their own folder.
FUZZ_BUILD	?= build/fuzz
FUZZ_CC		?= clang
FUZZ_SECONDS	?= 60
FUZZ_CI_SECONDS	?= 10
FUZZ_TARGETS	 = $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))

# fuzz-build: the fuzz targets, into build/fuzz
fuzz-build: deps-check
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz-build: $(FUZZ_CC) not found:" \
		"the fuzz targets need clang (libFuzzer); FUZZ_CC=... names another" >&2; exit 1; }
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT=-O1 CUDA=0 \
		SAN=fuzzer-no-link,address,undefined fuzz-targets

# (the targets, with BUILD=$(FUZZ_BUILD): libFuzzer's main is linked in)
fuzz-targets: $(FUZZ_TARGETS:%=$(BUILD)/%)
$(BUILD)/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

# fuzz: each fuzz target for FUZZ_SECONDS (60) seconds, one after another
fuzz: fuzz-build
	@tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# fuzz-ci: each fuzz target for FUZZ_CI_SECONDS (10) seconds, from its corpus (CI)
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_CI_SECONDS)

# clean: remove build/
clean:
	rm -rf build

# help: this list
help:
	@sed -n 's/^# \([a-z0-9-]*\): /  \1\t/p' Makefile

-include $(LIB_OBJ:.o=.d) $(CUDA_OBJ:.o=.d) $(BUILD)/tests/emu_backend.d $(BENCH_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TESTS:%=%.d) $(TEST_COMMON:.o=.d) \
	 $(patsubst tools/%.c,$(BUILD)/tools/%.d,$(wildcard tools/kvt-*.c)) $(BUILD)/tools/kvtctl.d \
	 $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/%.d)
