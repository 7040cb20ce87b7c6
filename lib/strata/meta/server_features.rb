# frozen_string_literal: true

require "strata/meta/errors"

module Strata
  module Meta
    # What one memcached server can do, learned by asking it rather than trusting its version
    # string. The client probes each server once per process, on first use, with one pipeline of
    # commands whose every reply is a single line (stats settings ends with END):
    #
    #   version                      VERSION <v>
    #   mn                           MN with the meta protocol, ERROR without
    #   mg <probe> N1 T1 c           HD ... W when leases (N, W/Z) work, else CLIENT_ERROR/ERROR
    #   md <probe> I T1              HD (or NF) when invalidate-as-stale works
    #   mg <probe> E1                anything but an error when E (explicit CAS) works
    #   md <probe>                   cleanup: HD or NF
    #   stats settings               STAT lines, END; item_size_max is the largest item (nil
    #                                when a proxy answers it with an error)
    #
    # The probe key is unique per probe and lives at most one second.
    # Debian's memcached 1.6.18 answers: meta, leases and stale, no E, 1 MiB items.
    ServerFeatures = Struct.new(:version, :meta, :leases, :stale, :explicit_cas, :item_size_max) do
      # Runs the probe on conn (inside Connection#request) for probe_key.
      def self.probe(conn, probe_key)
        conn.write("version\r\nmn\r\nmg #{probe_key} N1 T1 c\r\nmd #{probe_key} I T1\r\nmg #{probe_key} E1\r\n" \
          "md #{probe_key}\r\nstats settings\r\n")
        version = conn.read_line.delete_prefix("VERSION ")
        meta = conn.read_line == "MN"
        leases = conn.read_line.match?(/\AHD\b.* W\b/)
        stale = !error_line?(conn.read_line) # HD, or NF when N did not make the key: I was understood
        explicit_cas = !error_line?(conn.read_line)
        conn.read_line # cleanup
        new(version, meta, meta && leases, meta && stale, meta && explicit_cas, read_item_size_max(conn))
      end

      def self.error_line?(line)
        line == "ERROR" || line.start_with?("CLIENT_ERROR", "SERVER_ERROR")
      end

      # Reads "STAT <name> <value>" lines up to END (bounded: a stats reply has about 80 lines).
      def self.read_item_size_max(conn)
        size = nil
        256.times do
          line = conn.read_line
          return size if line == "END"
          return nil if error_line?(line)

          name, value = line.split(" ", 3).drop(1)
          size = Integer(value, 10) if name == "item_size_max"
        end
        raise ProtocolError, "stats settings not ended by END"
      end
      private_class_method :error_line?, :read_item_size_max
    end
  end
end
