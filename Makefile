# wbcache build.  `make` builds the library (static, and shared in the
# release build), the CLI, the tests and the benchmarks; it never installs
# packages (`make run`, `make check` and `make bench` do, as root, through
# scripts/install-deps).  `make SAN=address,undefined` or `make SAN=thread`
# builds a sanitized copy in its own directory (build/<san>/), so the
# switches never mix objects.

CC      ?= cc
SAN     ?=
comma   := ,
PREFIX  ?= /usr/local
V       ?= 0
ifeq ($(V),0)
  Q := @
endif

CFLAGS_BASE := -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
               -g -pthread -Iinclude -D_GNU_SOURCE
# header dependencies, tracked per object
DEPFLAGS = -MMD -MP
ifeq ($(SAN),)
  BUILD  := build/release
  CFLAGS_OPT := -O2
else
  BUILD  := build/$(subst $(comma),-,$(SAN))
  CFLAGS_OPT := -O1 -fno-omit-frame-pointer -fsanitize=$(SAN)
  ifneq ($(findstring undefined,$(SAN)),)
    # float-cast-overflow is not part of "undefined": a double from a spec
    # converted to an integer it does not fit is undefined all the same
    CFLAGS_OPT += -fsanitize=float-cast-overflow \
                  -fno-sanitize-recover=undefined,float-cast-overflow
  endif
endif
# x86-64: the 16-byte compare-and-swap of the dirty inbox (cmpxchg16b)
ifeq ($(shell uname -m),x86_64)
  CFLAGS_BASE += -mcx16
endif
override CFLAGS := $(CFLAGS_BASE) $(CFLAGS_OPT) $(EXTRA_CFLAGS)
# libnbd: the nbd backend (src/backend/nbd.c)
NBD_CFLAGS := $(shell pkg-config --cflags libnbd 2>/dev/null)
NBD_LIBS := $(shell pkg-config --libs libnbd 2>/dev/null || echo -lnbd)
# librados (librados-dev, no pkg-config file): the rados backend (src/backend/rados.c)
RADOS_LIBS := -lrados
LDLIBS  := -luring $(NBD_LIBS) $(RADOS_LIBS) -lpthread -lm
FUSE_CFLAGS = $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS = $(shell pkg-config --libs fuse3 2>/dev/null || echo -lfuse3)

LIB_SRC := $(wildcard src/*.c src/*/*.c)
LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
# The library users link exports only wbc_* (the rest made local in the
# archive, hidden by a version script in the shared object); the tests and
# benchmarks, which look inside, link every object as it is.
LIB     := $(BUILD)/libwbcache.a
LIB_INT := $(BUILD)/libwbcache-internal.a
VERSION := $(shell sed -n 's/^\#define WBCACHE_VERSION "\(.*\)"/\1/p' include/wbcache.h)
SOVER   := $(firstword $(subst ., ,$(VERSION)))
SHLIB   := $(BUILD)/libwbcache.so.$(VERSION)
# the CLI; tools/mount/ is `wbcache mount`, one file per part (mount.h)
TOOL_SRC := $(wildcard tools/*.c tools/mount/*.c)
TOOL_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(TOOL_SRC))
CLI     := $(BUILD)/wbcache
TEST_SRC := $(wildcard tests/*.c)
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%.t,$(TEST_SRC))
BENCH_SRC := $(wildcard bench/*.c)
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all deps deps-install check run bench install uninstall clean fuzz

# the examples, built in the tree against the public archive (the tests
# build them again from outside, against an installed copy)
EXAMPLES := $(BUILD)/examples/dirstore-demo $(BUILD)/examples/wbcopy
# the nbdkit filter (nbdkit/): the public archive linked into the filter's
# shared object, so nbdkit needs no libwbcache.so; its symbols stay inside
# (--exclude-libs), the filter exports nbdkit's entry point alone
NBDKIT_CFLAGS = $(shell pkg-config --cflags nbdkit 2>/dev/null)
NBDKIT_FILTER := $(BUILD)/nbdkit-wbcache-filter.so
# a plugin the filter's test puts under it (tests/plugins/)
NBDKIT_TEST_PLUGINS := $(BUILD)/tests/nbdkit-flakyflush-plugin.so
# a library the mount's fault test preloads under the daemon
# (tests/preload/): no sanitizer, whose runtime must come first
TEST_PRELOADS := $(BUILD)/tests/failsyncfs.so $(BUILD)/tests/mtimes.so
# `make install`: nbdkit's filter directory under PREFIX (PREFIX=/usr: the
# system's, `pkg-config --variable=filterdir nbdkit`)
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
NBDKIT_FILTERDIR ?= $(PREFIX)/lib/$(if $(MULTIARCH),$(MULTIARCH)/)nbdkit/filters
ALL := $(LIB) $(LIB_INT) $(CLI) $(TESTS) $(BENCHES) $(EXAMPLES) $(NBDKIT_FILTER) $(NBDKIT_TEST_PLUGINS) \
       $(TEST_PRELOADS)
ifeq ($(SAN),)
  ALL += $(SHLIB)
endif
all: deps $(ALL)
	@ln -sfn $(notdir $(BUILD)) build/current 2>/dev/null || true

# Lists missing Debian packages and fails; never installs.
deps:
	@scripts/install-deps --check
# Installs missing Debian packages when root, else lists them and fails
# (run, check and bench: before anything is built, even with -j).
deps-install:
	@scripts/install-deps --check-or-install

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TESTS:.t=.d) $(BENCHES:=.d) $(NBDKIT_FILTER:.so=.d)

# library objects are position-independent: the same ones make both libraries
$(BUILD)/src/%.o: src/%.c Makefile | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(DEPFLAGS) $(NBD_CFLAGS) -fPIC -Isrc -c $< -o $@

$(BUILD)/tools/%.o: tools/%.c Makefile | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(DEPFLAGS) $(FUSE_CFLAGS) -c $< -o $@

$(LIB_INT): $(LIB_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^

# The exported names: every wbc_* function the public headers declare
# (the base layer's wbc_ helpers, not in them, stay hidden).
PUBLIC_H := include/wbcache.h include/wbcache_backend.h
$(BUILD)/exports.txt: $(PUBLIC_H)
	@mkdir -p $(dir $@)
	$(Q)grep -ho 'wbc_[a-z0-9_]*(' $(PUBLIC_H) | tr -d '(' | sort -u >$@
$(BUILD)/libwbcache.map: $(BUILD)/exports.txt
	$(Q){ echo 'WBCACHE_0 {'; echo '	global:'; sed 's/.*/		&;/' $<; \
	     echo '	local:'; echo '		*;'; echo '};'; } >$@

# one relocatable object whose only global symbols are the exported ones
$(LIB): $(LIB_OBJ) $(BUILD)/exports.txt
	@rm -f $@ $(BUILD)/wbcache-public.o
	$(Q)ld -r -o $(BUILD)/wbcache-public.o $(LIB_OBJ)
	$(Q)objcopy --keep-global-symbols=$(BUILD)/exports.txt $(BUILD)/wbcache-public.o
	$(Q)ar rcs $@ $(BUILD)/wbcache-public.o

$(SHLIB): $(LIB_OBJ) $(BUILD)/libwbcache.map
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-soname,libwbcache.so.$(SOVER) \
		-Wl,--version-script=$(BUILD)/libwbcache.map $(LIB_OBJ) $(LDLIBS) -o $@
	@ln -sfn $(notdir $@) $(BUILD)/libwbcache.so.$(SOVER)
	@ln -sfn $(notdir $@) $(BUILD)/libwbcache.so

$(CLI): $(TOOL_OBJ) $(LIB)
	$(Q)$(CC) $(CFLAGS) $(TOOL_OBJ) $(LIB) $(LDLIBS) $(FUSE_LIBS) -o $@

# the conformance suite runs the example backend too
$(BUILD)/tests/conformance.t: TEST_EXTRA := -Iexamples examples/dirstore.c
$(BUILD)/tests/conformance.t: examples/dirstore.c
# a FUSE file system of its own, served in the test (libfuse, as the mount)
$(BUILD)/tests/read_short.t: TEST_EXTRA = $(FUSE_CFLAGS) $(FUSE_LIBS)
# the parsers' fuzz driver takes the mount's -o parser too
$(BUILD)/tests/fuzz_spec.t: TEST_EXTRA = $(FUSE_CFLAGS) tools/mount/options.c $(FUSE_LIBS)
$(BUILD)/tests/fuzz_spec.t: tools/mount/options.c
$(BUILD)/tests/%.t: tests/%.c $(LIB_INT) | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -MF $(BUILD)/tests/$*.d -MT $@ -Isrc $< $(TEST_EXTRA) $(LIB_INT) $(LDLIBS) -o $@

$(BUILD)/bench/%: bench/%.c $(LIB_INT) | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -MF $(BUILD)/bench/$*.d -MT $@ -Isrc $< $(LIB_INT) $(LDLIBS) -o $@

$(BUILD)/examples/dirstore-demo: examples/dirstore_main.c examples/dirstore.c examples/dirstore.h $(LIB) | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Iexamples examples/dirstore_main.c examples/dirstore.c $(LIB) $(LDLIBS) -o $@

$(BUILD)/examples/wbcopy: examples/wbcopy.c $(LIB) | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(NBDKIT_FILTER): nbdkit/wbcache-filter.c $(LIB) | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(NBDKIT_CFLAGS) -MMD -MP -MF $(@:.so=.d) -MT $@ -fPIC -shared \
		-fvisibility=hidden $< $(LIB) $(LDLIBS) -Wl,--exclude-libs,ALL -o $@

$(BUILD)/tests/nbdkit-%-plugin.so: tests/plugins/%.c Makefile | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(NBDKIT_CFLAGS) -fPIC -shared $< -o $@

$(TEST_PRELOADS): $(BUILD)/tests/%.so: tests/preload/%.c Makefile | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_BASE) -O2 -fPIC -shared $< -ldl -o $@

# run, check and bench build on every CPU (make -jN given: its jobs)
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
ALL_J = $(if $(findstring jobserver,$(MAKEFLAGS)),,-j$(JOBS))

# The main job: stream 1 GiB through the engine on the file backend.
run: deps-install
	@$(MAKE) $(ALL_J) --no-print-directory all
	$(CLI) run

# the layering of src/ first (scripts/check-layers; src/internal.h)
check: deps-install
	scripts/check-layers
	@$(MAKE) $(ALL_J) --no-print-directory all
	WBCACHE_BUILD=$(BUILD) tests/run

bench: deps-install
	@$(MAKE) $(ALL_J) --no-print-directory all
	WBCACHE_BUILD=$(BUILD) bench/stream.sh
	WBCACHE_BUILD=$(BUILD) bench/randwrite.sh
	WBCACHE_BUILD=$(BUILD) bench/example.sh
	WBCACHE_BUILD=$(BUILD) bench/throttle.sh
	WBCACHE_BUILD=$(BUILD) bench/stacked.sh
	WBCACHE_BUILD=$(BUILD) bench/nbd.sh
	WBCACHE_BUILD=$(BUILD) bench/rados.sh
	$(BUILD)/wbcache lab --out $(BUILD)/bench/lab all
	$(BUILD)/bench/isolation
	$(BUILD)/bench/overwrite
	$(BUILD)/bench/manyfiles
	WBCACHE_BUILD=$(BUILD) bench/mount.sh
	WBCACHE_BUILD=$(BUILD) bench/mount_peers.sh

# libFuzzer (clang): each target FUZZ_TIME seconds, one after the other.
#   fuzz_ops   file operations (tests/fuzz_ops.h): new finds land in
#              build/fuzz/corpus, crashes in build/fuzz/crash-*: copy those
#              into tests/fuzz-corpus/, where tests/fuzz_regress replays them
#   fuzz_spec  the parsers of users' text: device specs, sizes, times, the
#              mount's -o (tests/fuzz_spec.h): build/fuzz/spec-corpus,
#              build/fuzz/spec-crash-*, kept in tests/fuzz-spec-corpus/,
#              which tests/fuzz_spec replays
# in every `make check`.  The project's own flags (CFLAGS_BASE: warnings,
# -mcx16 for the inbox's 16-byte CAS), built with libFuzzer and the
# sanitizers instead of the -O2 of a release.
FUZZ_TIME ?= 60
FUZZ_CC   ?= clang
FUZZ_BIN  := build/fuzz/fuzz_ops
FUZZ_SPEC_BIN := build/fuzz/fuzz_spec
FUZZ_CFLAGS := $(CFLAGS_BASE) -O1 -fno-omit-frame-pointer \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
               $(EXTRA_CFLAGS)
FUZZ_HDRS := $(wildcard include/*.h src/*.h src/*/*.h)

$(FUZZ_BIN): $(LIB_SRC) fuzz/fuzz_ops.c $(FUZZ_HDRS) tests/fuzz_ops.h | deps
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs clang: scripts/install-deps (as root)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Isrc $(LIB_SRC) fuzz/fuzz_ops.c $(LDLIBS) -o $@

$(FUZZ_SPEC_BIN): $(LIB_SRC) fuzz/fuzz_spec.c tools/mount/options.c tools/mount/mount.h \
		  $(FUZZ_HDRS) tests/fuzz_spec.h | deps
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs clang: scripts/install-deps (as root)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUSE_CFLAGS) -Isrc $(LIB_SRC) tools/mount/options.c \
		fuzz/fuzz_spec.c $(LDLIBS) $(FUSE_LIBS) -o $@

fuzz: $(FUZZ_BIN) $(FUZZ_SPEC_BIN)
	@mkdir -p build/fuzz/corpus build/fuzz/spec-corpus
	$(FUZZ_BIN) -max_total_time=$(FUZZ_TIME) -artifact_prefix=build/fuzz/ \
		build/fuzz/corpus tests/fuzz-corpus
	$(FUZZ_SPEC_BIN) -max_total_time=$(FUZZ_TIME) -artifact_prefix=build/fuzz/spec- \
		-dict=fuzz/fuzz_spec.dict build/fuzz/spec-corpus tests/fuzz-spec-corpus

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/wbcache
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libwbcache.a
	install -m 755 $(SHLIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sfn $(notdir $(SHLIB)) $(DESTDIR)$(PREFIX)/lib/libwbcache.so.$(SOVER)
	ln -sfn $(notdir $(SHLIB)) $(DESTDIR)$(PREFIX)/lib/libwbcache.so
	@# wbcache.pc: the shared library; wbcache-static.pc: the archive (with
	@# both in one directory, -lwbcache takes the shared one, --static too)
	for pc in wbcache wbcache-static; do \
		sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' $$pc.pc.in \
			>$(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc || exit 1; \
	done
	install -m 644 include/wbcache.h include/wbcache_backend.h $(DESTDIR)$(PREFIX)/include/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 \
		$(DESTDIR)$(PREFIX)/share/man/man8
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	$(if $(wildcard man/*.3),install -m 644 $(wildcard man/*.3) $(DESTDIR)$(PREFIX)/share/man/man3/)
	install -m 644 man/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -d $(DESTDIR)$(NBDKIT_FILTERDIR)
	install -m 755 $(NBDKIT_FILTER) $(DESTDIR)$(NBDKIT_FILTERDIR)/
	@# the dynamic linker learns of the new library (a real install into
	@# a system prefix, as root; not for a staging or private prefix)
	$(if $(or $(DESTDIR),$(filter-out /usr /usr/local,$(PREFIX))),,if [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi)

# What install put there, removed again (the same PREFIX and DESTDIR)
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/wbcache $(DESTDIR)$(PREFIX)/lib/libwbcache.a \
		$(DESTDIR)$(PREFIX)/lib/$(notdir $(SHLIB)) $(DESTDIR)$(PREFIX)/lib/libwbcache.so.$(SOVER) \
		$(DESTDIR)$(PREFIX)/lib/libwbcache.so $(DESTDIR)$(PREFIX)/lib/pkgconfig/wbcache.pc \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig/wbcache-static.pc \
		$(DESTDIR)$(PREFIX)/include/wbcache.h $(DESTDIR)$(PREFIX)/include/wbcache_backend.h \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man1/,$(notdir $(wildcard man/*.1))) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man3/,$(notdir $(wildcard man/*.3))) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man8/,$(notdir $(wildcard man/*.8))) \
		$(DESTDIR)$(NBDKIT_FILTERDIR)/$(notdir $(NBDKIT_FILTER))
	$(if $(or $(DESTDIR),$(filter-out /usr /usr/local,$(PREFIX))),,if [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi)

clean:
	rm -rf build
