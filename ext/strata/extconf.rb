# frozen_string_literal: true

# mkmf's interface is its globals ($CFLAGS).
# rubocop:disable Style/GlobalVars
require "mkmf"

# C11 with POSIX/GNU extensions (flock, robust mutexes, MADV_WIPEONFORK).
$CFLAGS << " -std=c11 -D_GNU_SOURCE -Wall -Wextra"

abort "strata_ext needs POSIX threads" unless have_library("pthread")
# glibc >= 2.30: lock waits on CLOCK_MONOTONIC; otherwise a CLOCK_REALTIME timedlock.
have_func("pthread_mutex_clocklock", "pthread.h")

# Added after the feature probes, whose test programs are not warning-clean.
$CFLAGS << " -Werror" if ENV["STRATA_WERROR"]

create_makefile("strata/strata_ext")
# rubocop:enable Style/GlobalVars
