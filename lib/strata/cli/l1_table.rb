# frozen_string_literal: true

require "time"
require "strata/tiers/shared_memory"
require "strata/meta/host_outages"
require "strata/cli/segment_ages"

module Strata
  module CLI
    # The L1 table file as the app left it: its header read with File#pread, then the file
    # opened through Tiers::SharedMemory with the geometry the header gives, so that opening it
    # never rebuilds it.
    #
    # SharedMemory.new rebuilds a file whose header does not match what it is asked for (or that
    # is unfinished, or from another boot). So the header is checked here first against what
    # strata_open checks (table.c, file_validate), as far as Ruby can see it: magic number,
    # layout version, state READY, the file's size, a creation time after this boot, and the
    # geometry that the options passed will resolve to. A file that fails any of these is
    # reported and left closed. Not checked here (the C side does, and would rebuild): the
    # struct-size fingerprint and the header checksum, which only a file written by another
    # build or damaged in place fails.
    class L1Table
      # "STRATAL1" as a little-endian u64; the layout version this build writes (table.c).
      MAGIC = 0x314C415441525453
      LAYOUT_VERSION = 6
      STATE_READY = 2
      # struct file_header (table.h, LAYOUT): the fields up to the header check.
      HEADER = "Q<L<L<Q<Q<L<L<L<L<Q<Q<Q<Q<L<L<Q<Q<Q<"
      HEADER_BYTES = 4096
      FIELDS = %i[magic version state fingerprint file_size shards buckets_per_shard segments_per_shard
        segment_size ctl_offset index_offset data_offset seed creator_uid creator_pid created_ms boot_id check].freeze
      # table.h: slots per 64-byte bucket, data bytes per slot by default, a shard's control
      # block; counters.h: the host's counters region, after the control blocks; fill_locks.h: the
      # host's fill locks, between the counters and the index.
      SLOTS_PER_BUCKET = 7
      DATA_PER_SLOT = 96
      BUCKET_BYTES = 64
      CTL_BYTES = 128
      COUNTERS_BYTES = 4096 + 128 * 1024
      FILL_LOCK_BYTES = 64 * 1024

      # Why a file can't be opened without being changed.
      class Refused < StandardError; end

      attr_reader :path

      def initialize(path)
        @path = File.expand_path(path)
      end

      # Geometry, live entries, the segments' ages (SegmentAges), the host's counters
      # (SharedMemory#counters: reading them claims no slot) and, for each of memcached (server
      # names as the client's Ring gives them) that some live process of the host considers
      # down, host_outages: {server => {down_since: ISO 8601 time, down_marked_by: pid}}
      # (Meta::HostOutages). Raises Refused, or Strata::Error from the open.
      def stats(memcached: [])
        open do |table, header|
          figures(table.stats, header).merge(segments: SegmentAges.new(table.segment_starts).to_h,
            host_counters: table.counters, host_outages: outages(table, memcached))
        end
      end

      # Yields the table (a Tiers::SharedMemory) and its header, closing the table after; raises
      # Refused, or Strata::Error from the open.
      def open
        header = read_header
        table = Strata::Tiers::SharedMemory.new(path: @path, size: header[:file_size], shards: header[:shards],
          segment_size: header[:segment_size], slots: resolved_slots(header), memo_size: 0)
        begin
          yield table, header
        ensure
          table.close
        end
      end

      private

      # The records of servers' outages whose process is alive (one that died while the server
      # was down left its record behind, and no longer considers anything down).
      def outages(table, servers)
        servers.each_with_object({}) do |server, found|
          since, pid = Strata::Meta::HostOutages.decode(table.get(Strata::Meta::HostOutages.key(server)))
          next unless since && Strata::Meta::HostOutages.alive?(pid)

          found[server] = {down_since: Time.at(Rational(since, 1000)).utc.iso8601(3), down_marked_by: pid}
        end
      end

      def read_header
        unless File.file?(@path)
          closed = unreachable_directory
          raise Refused, "#{@path}: no such file" unless closed

          raise Refused, "#{@path}: #{closed} is not open to this user (uid #{Process.uid}; it is uid " \
            "#{File.stat(closed).uid}'s, mode #{format("%o", File.stat(closed).mode & 0o777)}): run as the app's user"
        end

        bytes = File.open(@path, "rb") { |f| f.pread(HEADER_BYTES, 0) }
        raise Refused, "#{@path}: not a Strata L1 table (too short)" if bytes.bytesize < HEADER_BYTES

        header = FIELDS.zip(bytes.unpack(HEADER)).to_h
        check_header(header)
        header
      end

      def check_header(header)
        raise Refused, "#{@path}: not a Strata L1 table (wrong magic number)" unless header[:magic] == MAGIC
        raise Refused, "#{@path}: layout version #{header[:version]}, this build reads #{LAYOUT_VERSION}" unless header[:version] == LAYOUT_VERSION
        raise Refused, "#{@path}: not finished building (state #{header[:state]})" unless header[:state] == STATE_READY
        raise Refused, "#{@path}: header says #{header[:file_size]} bytes, the file has #{File.size(@path)}" unless header[:file_size] == File.size(@path)

        boot = boot_time
        return unless boot && header[:created_ms] < boot * 1000

        raise Refused, "#{@path}: built before the last reboot (the app's next open rebuilds it)"
      end

      # The nearest directory above the path that exists and that this user may not enter (a
      # 0700 directory of another user), or nil.
      def unreachable_directory
        dir = File.dirname(@path)
        # Bound: the path's depth.
        until dir == File.dirname(dir)
          return dir if File.directory?(dir) && !File.executable?(dir)

          dir = File.dirname(dir)
        end
        nil
      end

      # The slots option that makes SharedMemory resolve exactly the header's geometry: the
      # explicit count when that lays the file out the same, else 0 (the default) when that does
      # (strata_geometry_resolve, table.c). Anything else would rebuild the file.
      def resolved_slots(header)
        explicit = header[:shards] * header[:buckets_per_shard] * SLOTS_PER_BUCKET
        return explicit if layout(explicit_layout(header)) == layout(header)
        return nil if layout(default_layout(header)) == layout(header)

        raise Refused, "#{@path}: its geometry is not one this build resolves to; opening it would rebuild it"
      end

      def layout(geometry)
        geometry.values_at(:buckets_per_shard, :segments_per_shard, :index_offset, :data_offset)
      end

      def explicit_layout(header)
        shards, buckets, seg = header.values_at(:shards, :buckets_per_shard, :segment_size)
        index = round_up(shards * buckets * BUCKET_BYTES)
        {buckets_per_shard: buckets, segments_per_shard: (available(header) - index) / shards / seg,
         index_offset: index_offset(header), data_offset: index_offset(header) + index}
      end

      def default_layout(header)
        shards, seg = header.values_at(:shards, :segment_size)
        avail = available(header)
        per_data = avail / shards * (SLOTS_PER_BUCKET * DATA_PER_SLOT) / (SLOTS_PER_BUCKET * DATA_PER_SLOT + BUCKET_BYTES)
        segs = per_data / seg
        buckets = (avail - shards * segs * seg) / 4096 * 4096 / (shards * BUCKET_BYTES)
        {buckets_per_shard: buckets, segments_per_shard: segs, index_offset: index_offset(header),
         data_offset: index_offset(header) + round_up(shards * buckets * BUCKET_BYTES)}
      end

      def index_offset(header)
        HEADER_BYTES + round_up(header[:shards] * CTL_BYTES) + COUNTERS_BYTES + FILL_LOCK_BYTES
      end

      def available(header)
        header[:file_size] - index_offset(header)
      end

      def round_up(bytes)
        (bytes + 4095) / 4096 * 4096
      end

      # Seconds since the epoch at this boot (btime in /proc/stat), or nil where unreadable.
      def boot_time
        line = File.foreach("/proc/stat").find { |l| l.start_with?("btime ") }
        line && Integer(line.split[1], 10)
      rescue SystemCallError
        nil
      end

      # Only the figures that are the table's: SharedMemory#stats's counters (hits, misses, sets,
      # evictions, ...) and memo figures are this process's, zero here; the host's are
      # SharedMemory#counters.
      def figures(stats, header)
        geometry = stats.slice(:size, :shards, :segment_size, :segments_per_shard, :slots, :data_bytes, :max_value_size)
        geometry.merge(path: @path, entries: stats[:entries], slot_fill: stats[:entries].fdiv(stats[:slots]).round(6),
          created_at: Time.at(header[:created_ms] / 1000, header[:created_ms] % 1000, :millisecond).utc.iso8601, creator_pid: header[:creator_pid])
      end
    end
  end
end
