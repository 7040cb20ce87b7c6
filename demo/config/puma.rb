# frozen_string_literal: true

# Puma for the demo (bin/demo): WEB_CONCURRENCY workers (default 2) forked from one booted app
# (preload_app!), so every worker maps the one L1 table the app opened, on STRATA_DEMO_BIND:PORT
# (default 127.0.0.1:3000; PORT 0 takes a free port, which the "Listening on" line names).
# bin/cluster binds each app host's address, in that host's network namespace.
workers Integer(ENV.fetch("WEB_CONCURRENCY", 2))
threads_count = Integer(ENV.fetch("RAILS_MAX_THREADS", 3))
threads threads_count, threads_count
preload_app!
bind "tcp://#{ENV.fetch("STRATA_DEMO_BIND", "127.0.0.1")}:#{Integer(ENV.fetch("PORT", 3000))}"

# The HTTP tests (demo/test/support/demo_server.rb) set STRATA_DEMO_THREAD_DUMPS: SIGPWR then
# makes a worker print every thread's backtrace to its log, for a request that got no answer.
if ENV["STRATA_DEMO_THREAD_DUMPS"]
  before_worker_boot do
    Signal.trap("PWR") do
      Thread.list.each do |thread|
        warn "[#{Process.pid}] thread #{thread.name || thread.object_id} #{thread.status}\n  " \
          "#{(thread.backtrace || []).first(30).join("\n  ")}"
      end
    end
  end
end
