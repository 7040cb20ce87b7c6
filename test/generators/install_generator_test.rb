# frozen_string_literal: true

require "test_helper"
require_relative "../railtie/rails_app"

# The strata:install generator. On an app `rails new` just made by the bundle's Rails, through
# its own bin/rails: each environment file gets its lines, a second run changes nothing,
# production boots on L1 over the SQLite file, and development on L1 alone (Rails 7: with
# `bin/rails dev:cache` on, :null_store before; Rails 8: either way), logging invalidations.
# Production with the line solid_cache:install writes (a full Rails 8 app's). On environment
# files written by hand (the generator class run in a child Ruby, no app): Rails 8's development
# layout on any Rails, the other layouts, files without a cache store, stores configured
# otherwise, bad options.
# L1 tables go under the test's directory (XDG_RUNTIME_DIR), which is removed after each test.
class InstallGeneratorTest < Minitest::Test
  RailsApp = Strata::TestSupport::RailsApp
  ENVIRONMENTS = %w[production development test].freeze
  # The generator class alone, in a child Ruby: ARGV is the app's directory, then the options.
  RUN_GENERATOR = <<~RUBY
    require "generators/strata/install/install_generator"
    Strata::Generators::InstallGenerator.start(ARGV.drop(1), destination_root: ARGV.first)
  RUBY
  # Rails 8's development.rb keeps the store out of the dev:cache branch (which toggles
  # perform_caching only): the bundle's `rails new` writes that one.
  RAILS_8 = Gem.loaded_specs.fetch("railties").version >= Gem::Version.new("8.0")
  # The environment files Rails 7.1 and 7.2 generate, as far as the cache store goes.
  RAILS_LINES = {
    "production" => "  # Use a different cache store in production.\n  # config.cache_store = :mem_cache_store\n",
    "development" => <<-RUBY,
  if Rails.root.join("tmp/caching-dev.txt").exist?
    config.action_controller.perform_caching = true

    config.cache_store = :memory_store
  else
    config.action_controller.perform_caching = false

    config.cache_store = :null_store
  end
    RUBY
    "test" => "  config.action_controller.perform_caching = false\n  config.cache_store = :null_store\n"
  }.freeze
  # Rails 8.0 and 8.1's development.rb, as far as the cache store goes.
  RAILS_8_DEVELOPMENT = <<-RUBY
  # Enable/disable Action Controller caching. By default Action Controller caching is disabled.
  # Run rails dev:cache to toggle Action Controller caching.
  if Rails.root.join("tmp/caching-dev.txt").exist?
    config.action_controller.perform_caching = true
    config.action_controller.enable_fragment_cache_logging = true
    config.public_file_server.headers = { "cache-control" => "public, max-age=\#{2.days.to_i}" }
  else
    config.action_controller.perform_caching = false
  end

  # Change to :null_store to avoid any caching.
  config.cache_store = :memory_store

  # Store uploaded files on the local file system (see config/storage.yml for options).
  RUBY
  # What solid_cache:install (1.0) does to production.rb, as `rails new` runs it for a full
  # Rails 8 app (and as it does to a Rails 7.2 app's).
  SOLID_CACHE_INSTALL = [/(# )?config\.cache_store = (:.*)/, "config.cache_store = :solid_cache_store"].freeze

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    @env = {"XDG_RUNTIME_DIR" => @dir} # L1's default path: <dir>/strata-<uid>/<app>-<env>.l1
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  def test_a_new_app_is_configured_once_boots_in_production_and_logs_invalidations_in_development
    app = RailsApp.new_app(@dir, "shop")
    first = rails(app, "generate", "strata:install", "--l1-size=1")
    assert first.success?, first.to_s
    files = environment_files(app)

    production = files["production"]
    refute_includes production, "# config.cache_store = :mem_cache_store", "Rails' commented line is replaced"
    assert_equal 1, production.scan("config.cache_store = :strata_store, {").size
    assert_includes production, "  config.cache_store = :strata_store, {\n    l1: {size: 1 << 20}, # 1 MiB\n" \
      "    sql: {path: Rails.root.join(\"storage/strata_cache.sqlite3\")},\n"
    assert_includes production, "    # memcached: {servers: [\"10.0.0.5:11211\", \"10.0.0.6:11211\"]},\n"
    assert_includes production, "    # sql: {connection_class: \"ApplicationRecord\"},\n"

    development = files["development"]
    caching, not_caching, after = development.match(/^  if Rails\.root\.join\("tmp\/caching-dev\.txt"\)\.exist\?\n(.*?)^  else\n(.*?)^  end\n(.*)/m)&.captures
    assert caching, "Rails' dev:cache branch is there:\n#{development}"
    assert_equal RAILS_8 ? 1 : 2, development.scan(/^\s*config\.cache_store/).size, development
    refute_match(/^\s*config\.cache_store = :memory_store/, development)
    if RAILS_8
      refute_match(/cache_store/, caching + not_caching, "the branch toggles perform_caching only")
      assert_match(/^  # Change to :null_store to avoid any caching\.\n(  #.*\n)*  config\.cache_store = :strata_store, \{l1: \{size: 1 << 20\}\} # 1 MiB\n/, after)
      assert_includes after, "`bin/rails dev:cache` toggles Action Controller's caching (perform_caching) only.\n"
    else
      assert_includes caching, "    config.cache_store = :strata_store, {l1: {size: 1 << 20}} # 1 MiB\n"
      assert_includes not_caching, "config.cache_store = :null_store", "no cache while dev:cache is off"
    end

    test = files["test"]
    assert_equal 1, test.scan(/^\s*config\.cache_store/).size
    assert_match(/Strata::Model's invalidations are no-ops.*\n(  #.*\n)*  config\.cache_store = :null_store\n/, test)

    second = rails(app, "generate", "strata:install", "--l1-size=1")
    assert second.success?, second.to_s
    assert_equal files, environment_files(app), "a second run changes nothing"
    ENVIRONMENTS.each { |env| assert_match(%r{identical\s+config/environments/#{env}\.rb}, second.out) }

    booted = RailsApp.ruby(app, "-e", <<~RUBY, env: @env.merge("RAILS_ENV" => "production"))
      require "./config/environment"
      store = Rails.cache
      puts store.class.name, store.stack.tier_names.inspect, store.stack[:l1].path
      puts store.write("greeting", "hello"), store.read("greeting")
    RUBY
    assert booted.success?, booted.to_s
    l1 = File.join(@dir, "strata-#{Process.uid}", "shop-production.l1")
    assert_equal ["ActiveSupport::Cache::StrataStore", "[:l1, :l3]", l1, "true", "hello"], booted.out.lines.last(5).map(&:chomp)
    assert_equal 1 << 20, File.size(l1), "the table has the size given"
    assert File.file?(File.join(app, "storage/strata_cache.sqlite3")), "the SQLite file is under storage/"

    stores = [false, true].map do |caching_on|
      if caching_on
        toggled = rails(app, "dev:cache")
        assert toggled.success?, toggled.to_s
      end
      assert_equal caching_on, File.exist?(File.join(app, "tmp/caching-dev.txt")), "dev:cache's file"
      developed = RailsApp.ruby(app, "-e", <<~RUBY, env: @env.merge("RAILS_ENV" => "development"))
        require "./config/environment"
        store = Rails.cache
        puts store.respond_to?(:stack) ? store.stack.tier_names.inspect : store.class.name
        store.invalidate_tags("products/1", "products") if store.respond_to?(:invalidate_tags)
      RUBY
      assert developed.success?, developed.to_s
      developed.out.lines.last.chomp
    end
    assert_equal [RAILS_8 ? "[:l1]" : "ActiveSupport::Cache::NullStore", "[:l1]"], stores,
      "development, dev:cache off then on: L1 alone (Rails 7: only with caching on)"
    assert_match(%r{Strata invalidate \(\d+\.\dms\).*tags: products/1, products}, File.read(File.join(app, "log/development.log")))
  end

  # A full Rails 8 app's production.rb: `rails new` runs solid_cache:install, which turns Rails'
  # commented line into config.cache_store = :solid_cache_store (as it does in a Rails 7.2 app).
  # That is Rails' line too: Strata's replaces it, and it stays as a comment, to go back to.
  def test_solid_caches_line_is_replaced_and_kept_as_a_comment
    app = RailsApp.new_app(@dir, "shop")
    path = File.join(app, "config/environments/production.rb")
    rails_file = File.read(path).sub(*SOLID_CACHE_INSTALL)
    File.write(path, rails_file)
    line = "  config.cache_store = :solid_cache_store\n"
    comment = RAILS_8 ? "Replace the default in-process memory cache store with a durable alternative." : "Use a different cache store in production."
    assert_includes rails_file, "  # #{comment}\n#{line}"

    result = generate(app, "--l1-size=4")
    assert result.success?, result.to_s
    production = File.read(path)
    before, after = rails_file.split(line)
    kept = "  # Before strata:install (to go back, uncomment it and remove Strata's lines below):\n" \
      "  # config.cache_store = :solid_cache_store\n" \
      "  # (Solid Cache's config/cache.yml and its database in config/database.yml stay as they were.)\n"
    assert production.start_with?(before + kept), production
    assert production.end_with?(after), "the rest of the file is as it was"
    strata = production[(before + kept).size...-after.size]
    assert_match(/\A  # Strata \(bin\/rails generate strata:install\)\. L1:.*^  config\.cache_store = :strata_store, \{\n    l1: \{size: 4 << 20\}, # 4 MiB\n.*^  \}\n\z/m, strata)
    assert_equal 1, production.scan(/^\s*config\.cache_store/).size
    assert RubyVM::InstructionSequence.compile(production), "valid Ruby"

    files = environment_files(app)
    again = generate(app, "--l1-size=4")
    assert again.success?, again.to_s
    assert_equal files, environment_files(app), "a second run changes nothing"
  end

  # Rails 8 sets development's store after the dev:cache branch: Strata's is set there too, on
  # any Rails. A :null_store there (as Rails' comment suggests) is the user's choice.
  def test_rails_8s_development_keeps_its_store_set_whether_caching_is_on_or_not
    app = hand_written_app(RAILS_LINES.merge("development" => RAILS_8_DEVELOPMENT))
    result = generate(app, "--l1-size=8")
    assert result.success?, result.to_s
    strata = "  # Strata (bin/rails generate strata:install): L1 alone, this app's development table in shared\n" \
      "  # memory, shared by the server, console and jobs. Set with caching on or off, as Rails' memory\n" \
      "  # store was: `bin/rails dev:cache` toggles Action Controller's caching (perform_caching) only.\n" \
      "  config.cache_store = :strata_store, {l1: {size: 8 << 20}} # 8 MiB\n"
    expected = RAILS_8_DEVELOPMENT.sub("  config.cache_store = :memory_store\n", strata)
    assert_equal "Rails.application.configure do\n  config.eager_load = false\n#{expected}end\n", environment_files(app)["development"]

    null_store = RAILS_8_DEVELOPMENT.sub(":memory_store", ":null_store")
    app = hand_written_app("development" => null_store)
    before = environment_files(app)
    result = generate(app, "--l1-size=8")
    assert result.success?, result.to_s
    assert_equal before, environment_files(app)
    assert_match(%r{skip\s+config/environments/development\.rb}, result.out)
  end

  def test_files_without_a_cache_store_get_it_inside_their_configure_block
    app = hand_written_app("production" => "  # config.cache_store = :mem_cache_store, \"cache-1\"\n", "development" => "", "test" => "")
    result = generate(app, "--sql=none", "--l1-size=8")
    assert result.success?, result.to_s
    files = environment_files(app)

    assert_includes files["production"], "  config.cache_store = :strata_store, {\n    l1: {size: 8 << 20}, # 8 MiB\n" \
      "    # Several hosts"
    refute_match(/^\s*sql:/, files["production"], "L1 alone: the SQL lines are comments")
    assert_includes files["production"], "  # config.cache_store = :mem_cache_store, \"cache-1\"\n", "a comment stays"
    assert_includes files["development"], "  if Rails.root.join(\"tmp/caching-dev.txt\").exist?\n" \
      "    config.cache_store = :strata_store, {l1: {size: 8 << 20}} # 8 MiB\n  else\n    config.cache_store = :null_store\n  end\n"
    assert_match(/no-ops.*\n(  #.*\n)*  config\.cache_store = :null_store\n/, files["test"])
    files.each_value { |source| assert RubyVM::InstructionSequence.compile(source), "valid Ruby" }

    again = generate(app, "--sql=none", "--l1-size=8")
    assert again.success?, again.to_s
    assert_equal files, environment_files(app), "a second run changes nothing"
  end

  def test_the_apps_database_gets_the_migration_and_the_class_named
    app = hand_written_app(RAILS_LINES)
    2.times do |run|
      result = generate(app, "--sql=app", "--connection-class=CacheRecord")
      assert result.success?, result.to_s
      production = File.read(File.join(app, "config/environments/production.rb"))
      assert_includes production, "    l1: {size: 32 << 20}, # 32 MiB\n    sql: {connection_class: \"CacheRecord\"},\n", "run #{run + 1}"
      assert_includes production, "    # sql: {path: Rails.root.join(\"storage/strata_cache.sqlite3\")},\n"
      assert_equal 1, Dir[File.join(app, "db/migrate/*_create_strata_entries.rb")].size, "one migration after run #{run + 1}"
    end
  end

  def test_a_store_configured_otherwise_is_left_as_it_is
    lines = {
      "production" => "  config.cache_store = :mem_cache_store, \"cache-1.example.com\"\n",
      "development" => "  config.cache_store = :file_store, \"tmp/cache\"\n",
      "test" => "  config.cache_store = :memory_store\n"
    }
    app = hand_written_app(lines)
    before = environment_files(app)
    result = generate(app)
    assert result.success?, result.to_s
    assert_equal before, environment_files(app)
    ENVIRONMENTS.each do |env|
      assert_match(%r{skip\s+config/environments/#{env}\.rb}, result.out)
      assert_includes result.out, "config/environments/#{env}.rb configures its cache store otherwise; left as it is"
    end
  end

  def test_bad_options_fail_and_change_nothing
    app = hand_written_app(RAILS_LINES)
    before = environment_files(app)
    {
      ["--l1-size=0"] => "--l1-size must be a whole number of MiB",
      ["--connection-class=cache-record", "--sql=app"] => "--connection-class must be a class name",
      ["--database=cache"] => "--database applies to --sql=app only",
      ["--sql=redis"] => "Expected '--sql' to be one of sqlite, app, none"
    }.each do |options, message|
      result = generate(app, *options)
      refute result.success?, "#{options.inspect} fails"
      assert_includes result.err, message
    end
    assert_equal before, environment_files(app)
  end

  private

  # bin/rails of app, with the test's L1 directory.
  def rails(app, *args)
    RailsApp.ruby(app, "bin/rails", *args, env: @env)
  end

  def generate(app, *options)
    RailsApp.ruby(@dir, "-I#{RailsApp::ROOT}/lib", "-e", RUN_GENERATOR, app, *options, env: @env)
  end

  # An app directory with only config/environments/*.rb, each a configure block around lines[env].
  def hand_written_app(lines)
    app = File.join(@dir, "app")
    FileUtils.mkdir_p(File.join(app, "config/environments"))
    lines.each do |env, body|
      File.write(File.join(app, "config/environments/#{env}.rb"), "Rails.application.configure do\n  config.eager_load = false\n#{body}end\n")
    end
    app
  end

  def environment_files(app)
    ENVIRONMENTS.to_h { |env| [env, File.read(File.join(app, "config/environments/#{env}.rb"))] }
  end
end
