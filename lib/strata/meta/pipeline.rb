# frozen_string_literal: true

require "strata/errors"
require "strata/meta/errors"
require "strata/meta/request"
require "strata/meta/response"

module Strata
  module Meta
    # Client's multi-key operations: the keys grouped by the server Ring routes them to, and one
    # pipeline per server, each command quiet and tagged with its index as opaque, ended by mn;
    # a server that fails doesn't stop the others (Strata::PartialError). Also the quiet md
    # pipelines of a recovery (#quiet_deletes) and of give_up_win. Included in Client, whose
    # routing, failure handling and counts (@ring, #dispatch, #routed, #gutter_write,
    # #gutter_delete, #server_ttl, @counts) it uses; the class comment of Client says what the
    # operations guarantee.
    module Pipeline
      # Bytes of an item besides its key and value (header, CAS, suffix, CRLF), rounded up: what
      # set_multi adds to an entry's size before comparing it with the server's item_size_max.
      ITEM_OVERHEAD = 64
      # The opaque of a pipeline's reply: the command's index, as its request gave it (opaque:).
      OPAQUE_INDEX = /\A\d{1,10}\z/
      # What a quiet ms or md answers (with its opaque) when it did not do its job; HD is silent.
      QUIET_REFUSALS = %i[not_stored exists not_found].freeze

      # {key => bytes} for the keys found. One pipeline per server: quiet mg (misses stay silent)
      # tagged with the key's index as opaque, ended by mn. When some servers fail, raises
      # Strata::PartialError whose result holds what the others found (when the one server asked
      # fails: its own error).
      def get_multi(keys)
        gutter = 0
        batches = keys.group_by do |key|
          server, role = @ring.route(key)
          gutter += 1 if role == :gutter
          server
        end
        @counts&.gutter_read(gutter) unless gutter.zero?
        each_server_batch(batches, {}) { |c, batch, found| read_batch(c, batch, found) }
      end

      # Stores each key => value; {key => true when stored}. One quiet pipeline per server (ms q,
      # the entry's index as opaque, then mn): a stored entry answers nothing, a refused one NS.
      # Every key and value is checked before anything is sent, so bad input writes nothing. An
      # entry over its server's item size limit (from the probe, see ITEM_OVERHEAD) is not sent
      # and its key is deleted, as memcached itself does; the others are stored, and the call
      # raises Strata::PartialError (caused by a ValueTooLargeError) with the results. A server
      # that fails raises PartialError with the other servers' results (when it was the only
      # server: its own error). So does an entry the server rejects anyway (SERVER_ERROR): that
      # reply carries no opaque, so the whole batch of that server counts as failed, though its
      # other entries may be stored.
      #
      # tokens: true answers, for each entry stored on a server with E (ServerFeatures
      # #explicit_cas), the random CAS it was given (an Integer, which #cas_multi compares later)
      # instead of true. A quiet ms does not say the CAS the server chose, so on a server without
      # E such entries stay true.
      def set_multi(entries, ttl: nil, tokens: false)
        batches = entries.each_with_object({}) do |(key, value), by_server|
          raise ArgumentError, "value of #{key.inspect} must be a String, got #{value.class}" unless value.is_a?(String)

          server, role = routed(key, entries.each_key)
          gutter_write(key, server) if role == :gutter
          batch = (by_server[server] ||= [])
          key_ttl = server_ttl(ttl, role)
          batch << [key, Request.ms_header(key, value.bytesize, ttl: key_ttl, opaque: batch.size, quiet: true), value, key_ttl]
        end
        too_large = []
        stored = each_server_batch(batches, {}, changes: true) do |c, batch, results, features|
          batch = with_new_cas(batch) if tokens && features.explicit_cas
          write_batch(c, batch, results, features.item_size_max, too_large)
        end
        return stored if too_large.empty?

        error = ValueTooLargeError.new("#{too_large.size} values over their server's item size limit, " \
          "first #{too_large.first.inspect}: not stored, old copies deleted")
        raise PartialError.new(error.message, result: stored, tier: :l2), cause: error
      end

      # {key => its item's CAS} for the keys present: one pipeline per server of quiet mg without
      # the value (misses stay silent), then mn. Failures as for #get_multi.
      def cas_multi(keys)
        batches = keys.group_by { |key| @ring.route(key).first }
        each_server_batch(batches, {}) { |c, batch, found| read_cas_batch(c, batch, found) }
      end

      # Removes keys; {key => true if it was there}. One quiet pipeline per server (md q, then mn):
      # a delete answers only when the key was absent (NF). Failures as for #set_multi.
      #
      # Keys whose server is down are deleted on the gutter and noted (see Outages), and the call
      # raises PartialError naming the first such server, with the results of the other keys.
      def delete_multi(keys)
        gutter = nil
        batches = keys.each_with_object({}) do |key, by_server| # every key checked before any is sent
          server, role = routed(key, keys)
          if role == :gutter
            gutter_delete(key, server)
            (gutter ||= []) << key
          end
          batch = (by_server[server] ||= [])
          batch << [key, Request.md(key, opaque: batch.size, quiet: true)]
        end
        deleted = each_server_batch(batches, {}, changes: true) do |c, batch, results|
          batch.each { |_key, request| c.write(request) }
          read_quiet_replies(c, batch.map(&:first), results, :md)
        end
        return deleted unless gutter

        gutter.each { |key| deleted.delete(key) }
        raise PartialError.new("#{@ring.server_for(gutter.first)} is down: some keys were deleted on a gutter only, and are " \
          "deleted on their server when it answers again", result: deleted, tier: :l2, server: @ring.server_for(gutter.first))
      end

      private

      # Runs one exchange per server over its batch, collecting into result; a failing server
      # doesn't stop the others (see PartialError). changes: the batches change their keys
      # (entries [key, ...]), which a failing server gets noted (see Outages).
      def each_server_batch(batches, result, changes: false)
        failure = nil
        batches.each do |server, batch| # bound: one pass per server
          dispatch(server) { |c, features| yield c, batch, result, features }
        rescue TierError, ValueTooLargeError => e
          batch.each { |key, *| note(server, key, nil) } if changes && e.is_a?(TierError)
          failure ||= e
        end
        return result unless failure
        raise failure if batches.size == 1

        raise PartialError.new("#{failure.message} (#{batches.size} servers asked)", result: result, tier: :l2,
          server: (failure.server if failure.is_a?(TierError))), cause: failure
      end

      # Writes a quiet mg per key and mn, then reads replies until MN into found. A reply that
      # names no key of the batch (no opaque, or one out of range) means the stream is out of step:
      # ProtocolError, and nothing of the batch is kept (its keys miss). A SERVER_ERROR takes the
      # place of one reply, which key's is unknown: the batch reads on to MN and raises it then.
      def read_batch(conn, batch, found)
        send_quiet_gets(conn, batch, true)
        won = []
        refusal = nil
        (batch.size + 1).times do # bound: one reply per key at most, then MN
          line = conn.read_line
          length, index = Response.value_with_opaque(line)
          next found[batch[index] || unplaced(line, batch)] = conn.read_bytes(length) if length # a fresh hit

          result = begin
            Response.parse(line)
          rescue ServerError => e
            refusal ||= e
            next
          end
          return batch_ended(conn, won, refusal, found) if result.status == :noop
          raise ProtocolError, "unexpected #{result.status} in a get_multi pipeline" unless result.value?

          key = batch[batch_index(result.opaque, batch.size)]
          value = conn.read_bytes(result.value_length)
          won << key if result.stale? && result.won?
          next if result.stale? || result.won? || result.lease_sent?

          found[key] = value
        end
        raise ProtocolError, "get_multi pipeline not ended by MN"
      rescue ProtocolError
        batch.each { |key| found.delete(key) }
        raise
      end

      # A quiet mg per key of batch (its opaque: the key's index) asking for its value (values)
      # or else its CAS, then mn.
      def send_quiet_gets(conn, batch, values)
        batch.each_with_index do |key, index| # bound: batch.size
          request = if values
            Request.mg(key, flags: false, cas: false, opaque: index, quiet: true)
          else
            Request.mg(key, value: false, flags: false, opaque: index, quiet: true)
          end
          conn.write(request)
        end
        conn.write(Request::MN)
      end

      # A read batch's MN: the refill wins it took go on (#give_up_win), the first SERVER_ERROR
      # it met is raised; else found.
      def batch_ended(conn, won, refusal, found)
        give_up_win(conn, won) unless won.empty?
        raise refusal if refusal

        found
      end

      # The index in a pipeline of size commands that a reply's opaque names; ProtocolError when
      # it names none (see #read_batch).
      def batch_index(opaque, size)
        index = opaque&.match?(OPAQUE_INDEX) ? opaque.to_i : size
        return index if index < size

        raise ProtocolError, "reply with opaque #{opaque.inspect} in a pipeline of #{size} commands"
      end

      def unplaced(line, batch)
        raise ProtocolError, "reply #{line.inspect} names no key of a pipeline of #{batch.size}"
      end

      # batch (set_multi's [key, header, value, ttl] entries) with a random CAS in each header
      # (E), as [key, header, value, ttl, cas]: write_batch answers that CAS for each one stored.
      def with_new_cas(batch)
        batch.each_with_index.map do |(key, _header, value, ttl), index|
          new_cas = Request.new_cas
          [key, Request.ms_header(key, value.bytesize, ttl: ttl, new_cas: new_cas, opaque: index, quiet: true), value, ttl, new_cas]
        end
      end

      # Quiet mg c per key (opaque: its index), then mn; found[key] = the CAS of each key present
      # and not stale. Refill wins of stale items go on, and a SERVER_ERROR is raised once MN is
      # read, as #read_batch does.
      def read_cas_batch(conn, batch, found)
        send_quiet_gets(conn, batch, false)
        won = []
        refusal = nil
        (batch.size + 1).times do # bound: one reply per key at most, then MN
          result = begin
            Response.parse(conn.read_line)
          rescue ServerError => e
            refusal ||= e
            next
          end
          return batch_ended(conn, won, refusal, found) if result.status == :noop
          raise ProtocolError, "unexpected #{result.status} in a cas_multi pipeline" unless result.status == :hit && result.cas

          key = batch[batch_index(result.opaque, batch.size)]
          won << key if result.stale? && result.won?
          found[key] = result.cas unless result.stale?
        end
        raise ProtocolError, "cas_multi pipeline not ended by MN"
      rescue ProtocolError
        batch.each { |key| found.delete(key) }
        raise
      end

      # Writes a quiet ms per entry and mn; an entry is stored unless its reply says otherwise.
      # An entry that can't fit the server's items (its SERVER_ERROR would carry no opaque) stops
      # the batch before any of it is sent.
      # An entry over the server's item size limit is not sent: its key is deleted instead, as
      # memcached does when it refuses a value, and it goes into too_large.
      def write_batch(conn, batch, stored, item_size_max, too_large)
        skipped = []
        batch.each_with_index do |(key, header, value), index| # bound: batch.size
          if item_size_max && key.bytesize + value.bytesize + ITEM_OVERHEAD > item_size_max
            skipped << key
            conn.write(Request.md(key, opaque: index, quiet: true))
          else
            conn.write(header, value, Request::CRLF)
          end
        end
        read_quiet_replies(conn, batch.map(&:first), stored, :ms)
        batch.each { |key, _header, _value, _ttl, new_cas| stored[key] = new_cas if new_cas && stored[key] }
        skipped.each { |key| stored[key] = false }
        too_large.concat(skipped)
      end

      # After quiet commands and mn: results[key] is true unless the key's reply (found by its
      # opaque, see #batch_index) says it was refused or absent. A SERVER_ERROR (no opaque: which
      # command's is unknown) is raised once MN is read, with results left alone.
      def read_quiet_replies(conn, keys, results, command)
        conn.write(Request::MN)
        refused = {}
        refusal = nil
        (keys.size + 1).times do # bound: one reply per command at most, then MN
          result = begin
            Response.parse(conn.read_line)
          rescue ServerError => e
            refusal ||= e
            next
          end
          if result.status == :noop
            raise refusal if refusal

            keys.each_with_index { |key, index| results[key] = !refused.key?(index) }
            return results
          end
          raise ProtocolError, "unexpected #{result.status} in a quiet #{command} pipeline" unless QUIET_REFUSALS.include?(result.status)

          refused[batch_index(result.opaque, keys.size)] = true
        end
        raise ProtocolError, "quiet #{command} pipeline not ended by MN"
      end

      # memcached hands the refill win of an invalidated item to the first mg of any kind. A plain
      # read that got it will not refill, and every lease reader would be told someone is (Z) for
      # the rest of the grace period; so it invalidates the item again (md I, no T: the value and
      # its grace stay), which hands the win to the next reader, and the next lease reader wins.
      def give_up_win(conn, keys)
        quiet_deletes(conn, keys, invalidate: true)
      end

      # One quiet pipeline of md (with I when invalidate) over keys on conn: {key => whether it
      # was there}.
      def quiet_deletes(conn, keys, invalidate: false)
        keys.each_with_index { |key, index| conn.write(Request.md(key, invalidate: invalidate, opaque: index, quiet: true)) }
        read_quiet_replies(conn, keys, {}, :md)
      end
    end
  end
end
