# frozen_string_literal: true

require "active_support/cache"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # Keys as the tiers get them: Rails' normalize_key made byte-wise, the namespace read per call
      # (namespace=), keys past max_key_size shortened with a digest; delete_matched's matchers.
      module Keys
        # Cache keys are at most max_key_size bytes, this many by default and at most (every tier's
        # limit: L1's table, memcached's protocol, the SQL tier's key column); longer ones become a
        # prefix, HASHED_KEY and a digest, as Rails' Store#truncate_key makes them.
        MAX_KEY_BYTES = 250
        # The smallest max_key_size: HASHED_KEY and a SHA-256 digest in hex (hash_digest_class's
        # longest in Rails) take 70 bytes, and at least 30 of the key itself stay in front.
        MIN_KEY_BYTES = 100
        HASHED_KEY = ":hash:"
        # Rails 8.1's Store#truncate_key drops the bytes of a character its cut splits, and any other
        # bytes that are not UTF-8, from the part it keeps: there keys are shortened the same way.
        # Before it (7.1 to 8.0) the cut is on the byte, as it has always been here, so the keys
        # entries are stored under stay what they were.
        SCRUBBED_CUT = Store.private_method_defined?(:truncate_key)

        unless Store.method_defined?(:namespace=)
          # Rails 8.1's Store#namespace and #namespace=, for the lines before it.
          def namespace
            @options[:namespace]
          end

          # Keys are made under the new namespace from the next call on, on every path: they all
          # read it from the store's options per call. The L1 table stays the one the namespace
          # given to new chose (its default path).
          def namespace=(namespace)
            @options[:namespace] = namespace
          end
        end

        private

        # The namespace options give (the store's unless they name one), a callable's answer.
        def namespace_of(options)
          namespace = options.key?(:namespace) ? options[:namespace] : @options[:namespace]
          namespace.respond_to?(:call) ? namespace.call : namespace
        end

        # What normalize_key puts before a plain String name under namespace: "namespace:", or ""
        # for none; nil when that is not ASCII (the byte-wise join would not be prefixed's).
        def key_prefix(namespace)
          return "" unless namespace

          prefix = "#{namespace}:"
          prefix if prefix.ascii_only?
        end

        # key => name for names, as normalize_key makes each key (under namespace, resolved once).
        def normalized_keys(names, options, namespace = namespace_of(options))
          keys_to_names = {}
          names.each do |name|
            # Anything but a plain String name (an Array, a record, a blank) takes normalize_key's
            # whole way: expanded, namespaced, then shortened once.
            next keys_to_names[normalize_key(name, options)] = name unless name.instance_of?(String) && !name.empty?

            key = namespace ? prefixed(name, namespace) : name
            keys_to_names[(key.bytesize <= @max_key_size) ? key : shortened(key)] = name
          end
          keys_to_names
        end

        # Keys are bytes for the tiers: no escaping, and the namespace is read without merging the
        # options again (the base normalize_key merges per call, which the read path can't afford).
        def normalize_key(key, options = nil)
          key = expanded_key(key) unless key.instance_of?(String)
          raise ArgumentError, "cache key cannot be blank (it is #{key.nil? ? "nil" : "empty"})" if key.nil? || key.empty?

          namespace = options&.key?(:namespace) ? options[:namespace] : @options[:namespace]
          key = namespaced(key, namespace) if namespace
          return key if key.bytesize <= @max_key_size

          shortened(key)
        end

        # key (namespaced, longer than max_key_size) cut to fit with HASHED_KEY and the digest of
        # all of it: Rails 8.1's truncate_key where it has one (SCRUBBED_CUT), else on the byte.
        def shortened(key)
          digest = ActiveSupport::Digest.hexdigest(key)
          kept = key.byteslice(0, @max_key_size - HASHED_KEY.bytesize - digest.bytesize)
          if SCRUBBED_CUT
            kept.force_encoding(Encoding::UTF_8).scrub!("")
          else
            kept.force_encoding(Encoding::BINARY)
          end
          kept << HASHED_KEY << digest
        end

        # The max_key_size option's value: an Integer every tier takes, MAX_KEY_BYTES when not
        # given. Not false (Rails' "no limit"): no tier takes a key over MAX_KEY_BYTES, so a long
        # key would fail every write (reported) and never be cached; mapping it to 250 would
        # instead hide that the option asked for something else.
        def checked_key_size(size)
          return MAX_KEY_BYTES if size.nil?
          if size == false
            raise ArgumentError, "max_key_size: false (no limit) is not supported: StrataStore's tiers take keys " \
              "of at most #{MAX_KEY_BYTES} bytes, and longer ones are shortened to max_key_size"
          end
          return size if size.is_a?(Integer) && size.between?(MIN_KEY_BYTES, MAX_KEY_BYTES)

          raise ArgumentError, "max_key_size must be an Integer from #{MIN_KEY_BYTES} to #{MAX_KEY_BYTES} (bytes), got #{size.inspect}"
        end

        def namespaced(key, namespace)
          namespace = namespace.call if namespace.respond_to?(:call)
          namespace ? prefixed(key, namespace) : key
        end

        # key under namespace (already called, when it is a callable).
        def prefixed(key, namespace)
          key = key.dup.force_encoding(Encoding::UTF_8) unless key.encoding == Encoding::UTF_8 || key.ascii_only?
          "#{namespace}:#{key}"
        end

        # The base answer, without probing a plain String name for a cache_version it can't have.
        def normalize_version(key, options = nil)
          version = options && options[:version]
          version&.to_param || (expanded_version(key) unless key.instance_of?(String))
        end

        def key_matches?(key, matcher)
          key = key.dup.force_encoding(Encoding::UTF_8)
          key.force_encoding(Encoding::BINARY) unless key.valid_encoding?
          matcher.is_a?(String) ? File.fnmatch?(matcher, key, File::FNM_DOTMATCH) : key.match?(matcher)
        rescue Encoding::CompatibilityError
          false
        end

        # A glob on the key without the namespace: the namespace, its own glob characters escaped,
        # goes in front.
        def glob_matcher(glob, options)
          namespace = options[:namespace]
          namespace = namespace.call if namespace.respond_to?(:call)
          namespace ? "#{namespace.to_s.gsub(/[*?\[\]{}\\]/) { |char| "\\#{char}" }}:#{glob}" : glob
        end
      end
    end
  end
end
