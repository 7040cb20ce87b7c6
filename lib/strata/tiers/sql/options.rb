# frozen_string_literal: true

require "active_record"
require "strata/tiers/sql/schema"

module Strata
  module Tiers
    class SQL
      # The SQL tier's checks at its API boundary: its options at #new (and create_table!'s
      # table_name), its keys, values and TTLs on every call. Each raises ArgumentError or
      # TypeError naming the option or key, before anything reaches the database. Pure: included
      # in SQL, whose methods call them as their own, and callable as Options.check_table_name.
      module Options
        MAX_KEY_BYTES = 250
        MAX_BATCH = 10_000
        MAX_BUSY_TIMEOUT = 60
        # The derived tables' names (Schema) must fit in an identifier too.
        TABLE_NAME = /\A[A-Za-z_][A-Za-z0-9_]{0,#{Schema::MAX_TABLE_NAME - 1}}\z/

        module_function

        def check_table_name(table_name)
          return if TABLE_NAME.match?(table_name.to_s)

          raise ArgumentError, "table_name must be an SQL identifier of at most #{Schema::MAX_TABLE_NAME} characters, got #{table_name.inspect}"
        end

        def check_key(key)
          raise TypeError, "key must be a String, not #{key.class}" unless key.is_a?(String)
          raise ArgumentError, "key is empty" if key.empty?
          raise ArgumentError, "key is #{key.bytesize} bytes; keys are at most #{MAX_KEY_BYTES} bytes" if key.bytesize > MAX_KEY_BYTES
        end

        def check_value(key, bytes)
          check_key(key)
          raise TypeError, "value of #{key.inspect} must be a String, not #{bytes.class}" unless bytes.is_a?(String)
        end

        # ttl itself when it is nil or a finite number of seconds; else TypeError or ArgumentError.
        def check_ttl(ttl)
          return ttl if ttl.nil? || (ttl.is_a?(Numeric) && ttl.real? && ttl.finite?)
          raise TypeError, "ttl must be a number of seconds or nil, not #{ttl.class}" unless ttl.is_a?(Numeric)

          raise ArgumentError, "ttl must be a finite number of seconds, got #{ttl.inspect}"
        end

        def validate_connection(path, connection_class, pool, busy_timeout)
          raise ArgumentError, "pass path: (embedded SQLite) or connection_class:, not both" if path && connection_class
          raise ArgumentError, "pass path: (embedded SQLite) or connection_class:" if path.nil? && connection_class.nil?
          return validate_embedded(path, pool, busy_timeout) if path

          unless record_class?(connection_class) || class_name?(connection_class)
            raise ArgumentError, "connection_class must be ActiveRecord::Base or a subclass, or its name " \
              "(a String such as \"CacheRecord\"), not #{connection_class.inspect}"
          end
          raise ArgumentError, "pool applies to path: only; connection_class brings its own pool" if pool
          raise ArgumentError, "busy_timeout applies to path: only; set the database's timeouts in its config" if busy_timeout
        end

        def record_class?(value)
          value.is_a?(Class) && value <= ActiveRecord::Base
        end

        # A constant's name: "CacheRecord", "Cache::Record".
        def class_name?(name)
          name.is_a?(String) && name.match?(/\A(::)?[A-Z]\w*(::[A-Z]\w*)*\z/)
        end

        def validate_embedded(path, pool, busy_timeout)
          raise ArgumentError, "path must be a non-empty String or Pathname" if path.to_s.empty?
          raise ArgumentError, "pool must be a positive Integer" unless optional?(pool) { pool.is_a?(Integer) && pool.positive? }
          unless optional?(busy_timeout) { busy_timeout.is_a?(Numeric) && busy_timeout.between?(0, MAX_BUSY_TIMEOUT) }
            raise ArgumentError, "busy_timeout must be between 0 and #{MAX_BUSY_TIMEOUT} seconds"
          end
        end

        def validate_limits(table_name, max_size, max_entries, max_age, max_value_size, batch, every)
          check_table_name(table_name)
          raise ArgumentError, "max_size must be nil or a positive Integer (bytes)" unless optional?(max_size) { positive_integer?(max_size) }
          raise ArgumentError, "max_entries must be nil or a positive Integer" unless optional?(max_entries) { positive_integer?(max_entries) }
          unless optional?(max_age) { max_age.is_a?(Numeric) && max_age.positive? }
            raise ArgumentError, "max_age must be nil or a positive number of seconds"
          end
          raise ArgumentError, "max_value_size must be a positive Integer (bytes)" unless positive_integer?(max_value_size)
          unless batch.is_a?(Integer) && batch.between?(1, MAX_BATCH)
            raise ArgumentError, "expiry_batch_size must be an Integer between 1 and #{MAX_BATCH}"
          end
          unless every.is_a?(Integer) && every.between?(1, batch)
            raise ArgumentError, "expire_every must be an Integer between 1 and expiry_batch_size (#{batch}): " \
              "a pass must be able to delete as many rows as were written since the last one"
          end
        end

        def validate_seconds(name, value)
          return if value.is_a?(Numeric) && value.real? && value.finite? && value.positive?

          raise ArgumentError, "#{name} must be a positive number of seconds, got #{value.inspect}"
        end

        def validate_invalidation_log(value)
          return if [nil, true, false].include?(value)

          raise ArgumentError, "invalidation_log must be true, false or nil, got #{value.inspect}"
        end

        # True when value is nil (the option is off) or the block accepts it.
        def optional?(value)
          value.nil? || yield
        end

        def positive_integer?(value)
          value.is_a?(Integer) && value.positive?
        end
      end
    end
  end
end
