# frozen_string_literal: true

# The process the instruction-count gate runs under callgrind (`valgrind --tool=callgrind
# --instr-atstart=no`): ruby probe.rb HELPER N OPERATION... For each operation, warm it up
# uninstrumented, then count N calls and 2N calls, each into a dump of its own labelled
# "OPERATION N" and "OPERATION 2N" (gate.rb takes the difference: what one call costs, without
# the loop's entry and the dump's own cost). Writes nothing else; a failure exits non-zero.

root = File.expand_path("../..", __dir__)
ENV["BUNDLE_GEMFILE"] ||= File.join(root, "gemfiles", "activesupport_7_2.gemfile")
ENV["BUNDLE_PATH"] ||= File.join(root, "vendor", "bundle")
require "bundler/setup"

require_relative "../active_support_setup"
require_relative "../environment"
require "strata"
require "strata/meta/client"
require "active_support/cache/strata_store"
require_relative "operations"

helper, count, *names = ARGV
require File.expand_path(helper)
count = Integer(count)
callgrind = Strata::Bench::Callgrind
abort "probe.rb runs under valgrind --tool=callgrind (bin/instructions starts it)" unless callgrind.running?

# Uninstrumented calls before counting: method caches, the L1 memo, sockets and SQLite's page
# cache are warm, and one-off allocations (string buffers, the first heap pages) are made.
WARMUP = 300

def run(operation, times)
  i = 0
  while i < times
    operation.call
    i += 1
  end
end

Strata::Bench::Environment.open do |env|
  names.each do |name|
    operation = Strata::Bench::Instructions::Operations.open(name, env)
    begin
      run(operation, WARMUP)
      GC.start
      # No collection inside the count: when a GC runs depends on the heap the earlier
      # operations left, not on the operation.
      GC.disable
      callgrind.start
      run(operation, count)
      callgrind.dump("#{name} #{count}")
      run(operation, 2 * count)
      callgrind.dump("#{name} #{2 * count}")
      callgrind.stop
      GC.enable
    ensure
      operation.close
    end
  end
end
