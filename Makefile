# The two commands of the quick start (docs/TESTING.md):
#   make run   installs what is missing, builds, creates a demo tenant and link
#              in ./.tally and starts tallyd in the foreground on 127.0.0.1:8080
#   make test  installs what is missing, builds with ASan+UBSan and -Werror and
#              runs every suite through ctest, each fuzz target briefly, cppcheck
#              (analyze), then checks formatting
# Other targets: build (release), install (PREFIX, DESTDIR), fuzz, analyze, bench, format,
# format-check, clean.

DEB_PACKAGES := build-essential cmake pkg-config clang clang-format libclang-rt-14-dev \
                libuv1-dev libsqlite3-dev libsodium-dev libcmocka-dev libhttp-parser-dev libraft-dev \
                sqlite3 curl nginx caddy redis-server wrk gnuplot-nox cppcheck clang-tidy \
                iproute2 nftables iptables libnetfilter-queue-dev faketime libfaketime
DATA ?= $(CURDIR)/.tally
HTTP ?= 127.0.0.1:8080
JOBS ?= 2
FUZZ_SECONDS ?= 60
FUZZ_TEST_SECONDS ?= 8
# Static analysis (`make analyze`): cppcheck over every source folder with the
# project's include dirs; reasons for each suppression in cppcheck.suppressions.
ANALYZE_DIRS := tenant store proto cluster supervisor cli fuzz bench tests examples
ANALYZE_INCLUDES := $(addprefix -I,tenant/include store/include proto/include cluster/include cluster \
                    supervisor/child/include supervisor/child supervisor/ledger/include \
                    supervisor/ledger supervisor/front/include supervisor/front proto cli \
                    tests/support fuzz)
SOURCES = $(shell git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build/*')

.PHONY: all deps build run install test fuzz fuzz-build analyze bench format format-check clean

all: build

# Installs the Debian packages that are missing (as root; otherwise says which).
deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make: missing Debian packages:$$missing (run as root or install them)"; exit 1; fi; \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

build: deps
	cmake --preset release >/dev/null
	cmake --build build/release -j$(JOBS)

run: build
	DATA=$(DATA) HTTP=$(HTTP) BIN=$(CURDIR)/build/release/cli scripts/demo.sh

# Installs tallyd, tally, libtally.so.0, tally.h, tally_common.h and tally.pc
# under PREFIX (GNUInstallDirs), staged under DESTDIR when given (packaging):
#   make install PREFIX=/usr/local DESTDIR=/tmp/stage
PREFIX ?= /usr/local
INSTALL_BUILD ?= build/release
install: deps
	cmake -S . -B $(INSTALL_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_WERROR=ON \
	      -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	cmake --build $(INSTALL_BUILD) -j$(JOBS) --target tallyd tally_cli tally_client
	DESTDIR=$(DESTDIR) cmake --install $(INSTALL_BUILD)

test: deps
	cmake --preset asan >/dev/null
	cmake --build build/asan -j$(JOBS)
	ctest --preset asan -j$(JOBS)
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_TEST_SECONDS)
	$(MAKE) --no-print-directory analyze
	$(MAKE) --no-print-directory format-check

# cppcheck: warnings, performance and portability; any finding fails.
analyze:
	@cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability --std=c17 \
	  --library=posix --inline-suppr --suppressions-list=cppcheck.suppressions -j$(JOBS) \
	  -D_POSIX_C_SOURCE=200809L -D__SIZEOF_INT128__=16 -D__GNUC__=12 $(ANALYZE_INCLUDES) \
	  $(ANALYZE_DIRS) && echo "analyze: ok (cppcheck, 0 findings)"

# libFuzzer targets (clang, ASan + UBSan) in build/fuzz; `make fuzz` runs each
# for FUZZ_SECONDS over fuzz/corpus/<name>/ and fails on a crash (fuzz/run.sh).
fuzz-build: deps
	cmake --preset fuzz >/dev/null
	cmake --build build/fuzz -j$(JOBS) --target fuzzers

fuzz: fuzz-build
	fuzz/run.sh $(FUZZ_SECONDS)

# Smoke run of the side-by-side benchmarks (< 2 min); `bench/run` alone is the
# full run that BENCHMARKS.md records. Builds its own release tree (build/bench).
bench: deps
	bench/run --quick

format:
	clang-format -i $(SOURCES)

format-check:
	@clang-format --dry-run --Werror $(SOURCES) && echo "format-check: ok"

clean:
	rm -rf build
