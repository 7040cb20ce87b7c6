# frozen_string_literal: true

require "yaml"

module Strata
  module CLI
    # Which tiers to look at: the store's options (the hash given to config.cache_store after
    # :strata_store) read from a file, or an L1 table file alone.
    #
    # A .rb file is evaluated and must return that Hash; any other file is read as YAML (symbol
    # keys accepted). A relative l1: or sql: path is the config file's directory's, not the
    # current directory's. For the SQL tier, sql: {url: "postgres://..."} names a database by URL
    # besides the store's path: and connection_class: (the latter only from a Ruby file). L1 is
    # looked at where the store would have one: l1: given, or neither memcached: nor sql:; its
    # path defaults to the store's (SharedMemory.default_name), the app and environment given
    # as app: and env: (else RAILS_ENV or RACK_ENV; outside the app the CLI has no Rails).
    class Config
      attr_reader :l1_path, :memcached, :sql

      def self.from_file(file)
        options = if File.extname(file) == ".rb"
          Object.new.instance_eval(File.read(file), file)
        else
          YAML.safe_load_file(file, permitted_classes: [Symbol], symbolize_names: true)
        end
        raise ArgumentError, "#{file}: expected a Hash of store options, got #{options.class}" unless options.is_a?(Hash)

        options = options.transform_keys(&:to_sym)
        dir = File.dirname(File.expand_path(file))
        %i[l1 sql].each { |tier| options[tier] = beside(options[tier], dir) if options[tier].is_a?(Hash) }
        new(**options.slice(:l1, :memcached, :sql, :namespace, :app, :env))
      end

      # tier options with a relative path: made absolute against dir (the config file's).
      def self.beside(tier, dir)
        tier = tier.transform_keys(&:to_sym)
        path = tier[:path]
        (path.is_a?(String) && !path.empty? && !path.start_with?("/")) ? tier.merge(path: File.expand_path(path, dir)) : tier
      end
      private_class_method :beside

      def self.from_path(path)
        new(l1: {path: path})
      end

      # From the options a store is given (config.cache_store's after :strata_store): its tiers
      # and namespace; the rest (expires_in, ...) says nothing of where the figures are.
      def self.from_store_options(options)
        new(**options.to_h.transform_keys(&:to_sym).slice(:l1, :memcached, :sql, :namespace))
      end

      def initialize(l1: nil, memcached: nil, sql: nil, namespace: nil, app: nil, env: nil)
        @memcached = memcached && symbolized(memcached, :memcached)
        @sql = sql && symbolized(sql, :sql)
        @l1_path = l1_path_for(l1 && symbolized(l1, :l1), namespace, app, env) if l1 || !(memcached || sql)
      end

      private

      def symbolized(hash, name)
        raise ArgumentError, "#{name}: must be a Hash of options" unless hash.is_a?(Hash)

        hash.transform_keys(&:to_sym)
      end

      def l1_path_for(l1, namespace, app, env)
        return l1[:path].to_s if l1&.dig(:path)

        Strata::Tiers::SharedMemory.default_path(Strata::Tiers::SharedMemory.default_name(namespace, app: app&.to_s, env: env&.to_s))
      end
    end
  end
end
