# frozen_string_literal: true

# Rails.cache: Strata's store. L1, one table file every process of the app maps (Puma's workers
# fork from the booted app, so they share it), over the SQL tier in the app's own database: its
# tag versions and invalidation log sit beside the bugs, where the triggers of a raw SQL UPDATE
# reach them, and each host's poller follows that log. memcached joins as L2 when
# STRATA_MEMCACHED names servers.
#
# It is made after initialization, not as config.cache_store: Rails makes that store before
# Active Record has connected, and this store's poller reads the log from its first moment. The
# database tasks (Rakefile) go without it.
Rails.application.config.after_initialize do
  next if Rails.application.config.x.strata_cache == false

  options = {
    namespace: "demo",
    l1: {path: ENV.fetch("STRATA_DEMO_L1") { Rails.root.join("tmp", "strata-demo.l1").to_s }, size: 32 << 20},
    sql: {connection_class: ApplicationRecord}
  }
  servers = ENV["STRATA_MEMCACHED"].to_s.split(",")
  options[:memcached] = {servers: servers} unless servers.empty?
  Rails.cache = ActiveSupport::Cache.lookup_store(:strata_store, options)
end
