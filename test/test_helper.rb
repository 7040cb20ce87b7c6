# frozen_string_literal: true

require "minitest/autorun"
require "tmpdir"
require "fileutils"
require "socket"
require "strata"

module Strata
  # Shared setup for the test suite: scratch directories and the servers bin/test started.
  module TestSupport
    # Two memcached instances that bin/test starts on loopback; overridable for local runs.
    MEMCACHED_SERVERS = ENV.fetch("STRATA_MEMCACHED", "127.0.0.1:21211,127.0.0.1:21212").split(",").freeze

    # RubyVM.stat counters that move for reasons other than cache invalidation (misses happen on
    # the first use of any constant); the VM-stat tests leave them out.
    VM_STAT_INFORMATIONAL = %i[constant_cache_misses].freeze

    module_function

    # RubyVM.stat without the informational counters: what a hot path must leave unchanged.
    def vm_cache_state
      RubyVM.stat.except(*VM_STAT_INFORMATIONAL)
    end

    # A new private directory (mode 0700) for table files; the caller removes it.
    def private_tmpdir
      dir = Dir.mktmpdir("strata-test")
      File.chmod(0o700, dir)
      dir
    end

    # A private directory (mode 0700) for table files, removed after the block.
    def with_tmpdir
      dir = private_tmpdir
      yield dir
    ensure
      FileUtils.remove_entry(dir) if dir && File.exist?(dir)
    end

    def memcached_servers
      MEMCACHED_SERVERS
    end

    # Empties the test memcached servers (flush_all), for a test whose tag versions must not be
    # an earlier test's: they are shared by every store on the same servers, whatever its
    # namespace.
    def flush_memcached
      MEMCACHED_SERVERS.each do |server|
        host, port = server.split(":")
        Socket.tcp(host, Integer(port), connect_timeout: 2) do |socket|
          socket.write("flush_all\r\n")
          answer = socket.gets
          raise "#{server}: flush_all answered #{answer.inspect}" unless answer == "OK\r\n"
        end
      end
    end

    # Deletes tag's version from every tier of cache's stack (those named in only), as an
    # eviction or a lost table would.
    def drop_versions(cache, tag, only: cache.stack.tier_names)
      only.each { |name| cache.stack.dependencies.versions_in(name).delete(Strata::Dependencies.tag_id(tag)) }
    end

    # The bytes of tag's version in cache's tier name, or nil.
    def version_in(cache, name, tag)
      cache.stack.dependencies.versions_in(name).get(Strata::Dependencies.tag_id(tag))
    end
  end
end
