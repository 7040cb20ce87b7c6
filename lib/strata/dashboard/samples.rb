# frozen_string_literal: true

require "json"
require "socket"
require "strata/meta/host_outages"

module Strata
  class Dashboard
    # The app processes' samples (Sampler) as kept in a host's L1 table: one per process under
    # one of SLOTS reserved keys ("\x00strata:dashboard:NN"; a NUL byte first, so no cache key
    # names one and Stack#keys lists none), each lapsing TTL seconds after its process last
    # published. #read sums them into the page's top lists, leaving out the samples of
    # processes that are gone (killed or exited before their sample lapsed).
    module Samples
      SLOTS = 64 # processes per host that can publish at once; one more finds no free slot
      KEY_FORMAT = "\x00strata:dashboard:%02d"
      TTL = 600 # seconds a sample outlives its last publication (an idle process; #read leaves out a dead one's)
      TOP = 15 # names per list on the page

      module_function

      def slot_key(slot)
        format(KEY_FORMAT, slot).b
      end

      # The first slot, from pid's place on, for which the block (an add of the sample) is true,
      # or nil after trying every one.
      def free_slot(pid)
        SLOTS.times do |offset|
          slot = (pid + offset) % SLOTS
          return slot if yield(slot)
        end
        nil
      end

      # The published JSON as a Hash, or nil when it is not one.
      def parse(bytes)
        sample = JSON.parse(bytes)
        sample.is_a?(Hash) ? sample : nil
      rescue JSON::ParserError
        nil
      end

      # The PID namespace of this process ("pid:[4026531836]"), nil where there is none to read
      # (not Linux): a sample's pid names a process only in the namespace it was published from.
      def pid_namespace
        File.readlink("/proc/self/ns/pid")
      rescue SystemCallError, NotImplementedError
        nil
      end

      # Whether sample's process is gone: published from this host and PID namespace, and no
      # process has its pid now. One seen from another namespace (a container of its own) can't
      # be told, and is kept until it lapses.
      def gone?(sample, host, namespace)
        sample["host"] == host && sample["pid_ns"] == namespace && !Meta::HostOutages.alive?(sample["pid"])
      end

      # Every published sample in table of a live process, summed: {processes: [{pid:, host:,
      # every:}, ...], misses: [[key, count], ...], fill_time: [[key, microseconds, fills],
      # ...], invalidations: [[tag, count], ...]}, heaviest first, TOP of each.
      def read(table)
        host = Socket.gethostname
        namespace = pid_namespace
        samples = table.get_multi(SLOTS.times.map { |slot| slot_key(slot) }).values.filter_map { |bytes| parse(bytes) }
        samples.reject! { |sample| gone?(sample, host, namespace) }
        lists = %w[misses fill_time invalidations].to_h do |list|
          totals = Hash.new { |hash, name| hash[name] = [0, 0] }
          samples.each do |sample|
            Array(sample[list]).each do |name, weight, count|
              totals[name][0] += weight.to_i
              totals[name][1] += count.to_i
            end
          end
          [list.to_sym, totals.sort_by { |_, (weight, _)| -weight }.first(TOP).map { |name, (weight, count)| [name, weight, count] }]
        end
        {processes: samples.map { |sample| sample.slice("pid", "host", "every").transform_keys(&:to_sym) }}.merge(lists)
      end
    end
  end
end
