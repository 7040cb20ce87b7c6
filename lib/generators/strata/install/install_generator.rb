# frozen_string_literal: true

require "erb"
require "rails/generators"

module Strata
  module Generators
    # bin/rails generate strata:install [--sql=sqlite|app|none] [--l1-size=MIB]
    #   [--connection-class=NAME] [--database=NAME]
    #
    # Sets config.cache_store in the app's environment files, where Rails users look for it (as
    # solid_cache:install does in production.rb); no file of its own, no initializer:
    #
    # - production: :strata_store, L1 over SQL: an SQLite file under storage/ (--sql=sqlite, the
    #   default), the app's database (--sql=app: through --connection-class, by name, and the
    #   strata:sql migration is generated, into --database's migrations path when given), or
    #   L1 alone (--sql=none); the other layouts and memcached as comments.
    #   Rails' line is replaced whether commented out (Rails 7's `# config.cache_store =
    #   :mem_cache_store`, a --minimal 8.x app's) or not (a full 8.x app's `config.cache_store =
    #   :solid_cache_store`, from solid_cache:install); a line that was not a comment stays above
    #   Strata's as one, to go back to.
    # - development: :strata_store with L1 alone where Rails' development.rb sets :memory_store:
    #   in Rails 7, inside the branch that tmp/caching-dev.txt (`bin/rails dev:cache`) selects,
    #   :null_store staying in the other; in Rails 8, after that branch, so the store is always set
    #   and dev:cache toggles Action Controller's caching only.
    # - test: :null_store stays, with a comment on what that means for Strata.
    #
    # Each file is changed only where it holds Rails' generated line (or no config.cache_store at
    # all); a store configured otherwise is left alone and reported, and a file that names
    # :strata_store already is skipped, so running it twice changes nothing.
    class InstallGenerator < Rails::Generators::Base
      SQL_CHOICES = %w[sqlite app none].freeze
      # A constant's name, as the SQL tier takes it ("CacheRecord", "Cache::Record").
      CLASS_NAME = /\A(::)?[A-Z]\w*(::[A-Z]\w*)*\z/
      ENVIRONMENTS = "config/environments"
      # A config.cache_store line that is not a comment.
      CACHE_STORE = /\A[ \t]*config\.cache_store[ \t]*=/
      # A line as Rails generates them: config.cache_store = :some_store, alone on its line,
      # commented out or not. The first group is the comment mark, the second the store's name.
      BARE_STORE = /\A[ \t]*(#[ \t]*)?config\.cache_store[ \t]*=[ \t]*:(\w+)[ \t]*\n?\z/
      # The branch of development.rb that `bin/rails dev:cache` toggles: its indent.
      DEV_CACHE_BRANCH = %r{\A([ \t]*)if\b.*tmp/caching-dev\.txt}
      # test.rb's line, as Rails generates it.
      NULL_STORE = /^[ \t]*config\.cache_store[ \t]*=[ \t]*:null_store[ \t]*$/
      # What marks a file this generator has changed.
      STRATA_STORE = /^[ \t]*config\.cache_store[ \t]*=[ \t]*:strata_store\b/
      MARK = "bin/rails generate strata:install"

      source_root File.expand_path("templates", __dir__)

      desc "Configures Strata as Rails.cache: production (L1 over SQLite, the app's database or " \
        "nothing), development (L1 while `bin/rails dev:cache` has caching on) and test (:null_store)."

      class_option :sql, type: :string, default: "sqlite", enum: SQL_CHOICES,
        desc: "Production's L3: sqlite (a file under storage/), app (the app's database), none (L1 alone)"
      class_option :l1_size, type: :numeric, default: 32,
        desc: "MiB of shared memory the L1 table reserves, in production and in development"
      class_option :connection_class, type: :string, default: "ApplicationRecord",
        desc: "With --sql=app: the Active Record class whose database holds the table"
      class_option :database, type: :string,
        desc: "With --sql=app: the database (in config/database.yml) whose migrations path gets the table's migration"

      # Bad options end the command with a failure status.
      def self.exit_on_failure?
        true
      end

      def check_options
        raise Thor::Error, "strata:install can't be undone: edit config/environments/*.rb by hand" if behavior == :revoke

        size = options[:l1_size]
        raise Thor::Error, "--l1-size must be a whole number of MiB, at least 1, got #{size.inspect}" unless size.is_a?(Integer) && size >= 1
        raise Thor::Error, "--connection-class must be a class name, got #{connection_class.inspect}" unless CLASS_NAME.match?(connection_class)
        raise Thor::Error, "--database applies to --sql=app only" if options[:database] && sql != "app"
      end

      # Replaces Rails' line: commented out, or (a full Rails 8 app's :solid_cache_store) not, and
      # then kept as a comment. A store with options, or set twice, is the user's own.
      def configure_production
        configure("production") do |lines|
          active, bare = store_lines(lines)
          next unless (active - bare).empty? && active.size <= 1

          line = active.first || bare.first
          if line
            replaced = line.strip if active.include?(line)
            replace_line("production", line, snippet("production.rb.tt", replaced: replaced))
          else
            environment(snippet("production.rb.tt", replaced: nil), env: "production")
          end
        end
      end

      # Rails' development.rb (one with the tmp/caching-dev.txt branch) sets :memory_store, in
      # Rails 7 inside that branch, in Rails 8 after it: that line becomes Strata's, and says
      # which of the two it is. With no cache store at all, the whole branch goes in.
      def configure_development
        configure("development") do |lines|
          active, bare = store_lines(lines)
          if active.empty?
            environment(snippet("development_toggle.rb.tt"), env: "development")
          elsif (active - bare).empty? && lines.any? { |line| line.include?("tmp/caching-dev.txt") }
            caching = active.reject { |line| BARE_STORE.match(line)[2] == "null_store" }
            next unless caching.size == 1

            always = !dev_cache_branch(lines).include?(lines.index(caching.first))
            replace_line("development", caching.first, snippet("development.rb.tt", always: always))
          end
        end
      end

      # :null_store stays (tests run without a cache); the comment says what that means here.
      def configure_test
        path = environment_file("test")
        return unless present?(path)

        content = read(path)
        return say_status(:identical, path, :blue) if content.include?(MARK)

        active, = store_lines(content.lines)
        if active.empty?
          environment("#{snippet("test.rb.tt")}config.cache_store = :null_store\n", env: "test")
        elsif active.size == 1 && active.first.match?(NULL_STORE)
          inject_into_file(path, indented(snippet("test.rb.tt"), active.first[/\A[ \t]*/]), before: /^#{Regexp.escape(active.first)}/)
        else
          left_alone("test", "config.cache_store = :null_store")
        end
      end

      # The strata:sql migration, for the app's database only.
      def create_sql_migration
        return unless sql == "app"

        require "generators/strata/sql/sql_generator"
        sql_options = %w[pretend force skip quiet].each_with_object({}) { |name, all| all[name] = options[name] if options.key?(name) }
        sql_options["database"] = options[:database] if options[:database]
        invoke SqlGenerator, [], sql_options
      end

      def warn_without_sqlite
        return if sql != "sqlite" || sqlite_available?

        say "The sqlite3 gem is not in this app's bundle, and production's SQL tier (an SQLite file) needs it: " \
          "bundle add sqlite3, or pick another layout among the lines in config/environments/production.rb.", :yellow
      end

      def next_steps
        say "Then: bin/rails db:migrate, for the SQL tier's tables." if sql == "app" && behavior == :invoke
      end

      private

      def sql
        options[:sql]
      end

      def l1_size
        options[:l1_size]
      end

      def connection_class
        options[:connection_class]
      end

      def environment_file(env)
        File.join(ENVIRONMENTS, "#{env}.rb")
      end

      # Yields the lines of env's file unless the file is missing or names :strata_store already;
      # when the block changed nothing, says so.
      def configure(env)
        path = environment_file(env)
        return unless present?(path)

        content = read(path)
        return say_status(:identical, path, :blue) if content.match?(STRATA_STORE)

        yield content.lines
        left_alone(env, "config.cache_store = :strata_store, ...") if read(path) == content && !options[:pretend]
      end

      # The indices of lines that the tmp/caching-dev.txt branch spans (if to end); empty without it.
      def dev_cache_branch(lines)
        start = lines.index { |line| DEV_CACHE_BRANCH.match?(line) }
        return [] unless start

        indent = lines[start][DEV_CACHE_BRANCH, 1]
        finish = (start + 1...lines.size).find { |i| lines[i].match?(/\A#{indent}end\b/) }
        finish ? (start..finish) : []
      end

      # The config.cache_store lines of lines: [those that are not comments, those as Rails
      # generates them (BARE_STORE)].
      def store_lines(lines)
        [lines.grep(CACHE_STORE), lines.grep(BARE_STORE)]
      end

      def present?(path)
        return true if File.exist?(File.join(destination_root, path))

        say_status(:missing, path, :red)
        false
      end

      def read(path)
        File.read(File.join(destination_root, path))
      end

      # Replaces the line (Rails' generated one) with lines, indented as it was.
      def replace_line(env, line, lines)
        line = line.chomp
        replacement = indented(lines, line[/\A[ \t]*/]).chomp
        gsub_file(environment_file(env), /^#{Regexp.escape(line)}$/) { replacement }
      end

      def left_alone(env, wanted)
        say_status(:skip, environment_file(env), :yellow)
        say "#{environment_file(env)} configures its cache store otherwise; left as it is. " \
          "Strata's line there: #{wanted} (bin/rails generate strata:install --help)", :yellow
      end

      # The template source rendered with this generator's options and locals.
      def snippet(source, **locals)
        context = binding
        locals.each { |name, value| context.local_variable_set(name, value) }
        ERB.new(File.read(File.join(self.class.source_root, source)), trim_mode: "-").result(context)
      end

      def indented(lines, indent)
        lines.each_line.map { |line| line.strip.empty? ? line : "#{indent}#{line}" }.join
      end

      def sqlite_available?
        Gem::Specification.find_by_name("sqlite3")
        true
      rescue Gem::MissingSpecError
        false
      end
    end
  end
end
