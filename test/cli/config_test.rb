# frozen_string_literal: true

require "test_helper"
require "strata/cli/config"
require "strata/tiers/shared_memory"

# Strata::CLI::Config finds L1 where the app's store has it: outside the app (no Rails loaded),
# the app and environment come from the config's app: and env: (else RAILS_ENV or RACK_ENV).
class StrataCLIConfigTest < Minitest::Test
  def test_the_default_l1_path_is_the_apps_for_its_app_env_and_namespace
    config = Strata::CLI::Config.new(namespace: "cache", app: "blog", env: "production")
    assert_equal Strata::Tiers::SharedMemory.default_path("blog-production-cache"), config.l1_path
    assert_equal "/tmp/given.l1", Strata::CLI::Config.new(l1: {path: "/tmp/given.l1"}, app: "blog").l1_path

    Strata::TestSupport.with_tmpdir do |dir|
      file = File.join(dir, "cache.yml")
      File.write(file, {"app" => "shop", "env" => "staging", "l1" => {"size" => 1 << 20}}.to_yaml)
      assert_equal Strata::Tiers::SharedMemory.default_path("shop-staging"), Strata::CLI::Config.from_file(file).l1_path
    end
  end
end
