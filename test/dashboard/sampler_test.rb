# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "active_support"
require "active_support/cache/strata_store"
require "strata/dashboard"
require "strata/dashboard/sampler"
require "support/child_processes"
require "support/fake_clock"

# Dashboard::Sampler in app processes and Samples read back by the dashboard: what is counted
# from a store's events, how often it is published, that several processes' samples add up in
# the one L1 table, and that a process killed drops out at once.
class DashboardSamplerTest < Minitest::Test
  include Strata::TestSupport
  include Strata::TestSupport::TrackedChildren

  TABLE_SIZE = 4 << 20
  DEADLINE = 30.0

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @stores = []
    @samplers = []
    @pids = []
    # Children stay alive, their samples published, until this pipe's write end is closed.
    @release_r, @release_w = IO.pipe
  end

  def teardown
    @release_w&.close
    kill_tracked_children
    @release_r&.close
    @samplers.each(&:stop)
    @stores.each(&:close)
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_top_k_keeps_the_heavy_names_in_bounded_memory
    top = Strata::Dashboard::TopK.new(3)
    50.times { |i| top.add("light-#{i}") }
    30.times { top.add("heavy") }
    10.times { top.add("middle", 2) }

    names = top.top

    assert_equal 3, names.size
    assert_equal %w[heavy middle], names.first(2).map(&:first)
    assert_operator names[0][1], :>=, 30
    assert_equal [10], names.select { |name, _, _| name == "middle" }.map(&:last)
  end

  def test_misses_fill_times_and_invalidated_tags_of_the_store_are_counted
    store = new_store
    sampler = start(store, every: 1)
    other = ActiveSupport::Cache::MemoryStore.new
    3.times { store.fetch("a") { "value" } }
    store.fetch("b", tags: ["bugs/1"]) { "value" }
    store.invalidate_tags("bugs/1", "bugs/2")
    other.fetch("not-strata") { "value" }

    sample = sampler.sample

    assert_equal [["a", 1, 1], ["b", 1, 1]], sample[:misses].sort
    assert_equal %w[a b], sample[:fill_time].map(&:first).sort
    assert(sample[:fill_time].all? { |_, us, fills| us >= 0 && fills == 1 })
    assert_equal [["bugs/1", 1, 1], ["bugs/2", 1, 1]], sample[:invalidations].sort
    assert_equal [Process.pid, 1], sample.values_at(:pid, :every)
  end

  def test_one_event_in_every_is_counted_and_long_keys_are_cut
    store = new_store
    sampler = start(store, every: 3)
    long = "views/posts/index:#{"k" * 80}/posts/12345"

    9.times { store.read(long) }

    cut = sampler.sample[:misses].first.first
    assert_equal [[cut, 3, 3]], sampler.sample[:misses]
    assert_equal Strata::Dashboard::Sampler::KEY_BYTES, cut.bytesize
    assert cut.start_with?("views/posts/index:"), cut
    assert cut.end_with?("kkk/posts/12345"), "the tail, where the record ids are, is kept: #{cut}"
  end

  def test_it_publishes_at_most_once_a_second
    clock = Strata::TestSupport::FakeClock.new
    store = new_store
    start(store, every: 1, clock: clock)
    table = store.stack[:l1]

    store.read("first")
    clock.now += 0.5
    store.read("second")
    published = Strata::Dashboard::Samples.read(table)[:misses].map(&:first)
    clock.now += 0.5
    store.read("third")

    assert_equal %w[first], published
    assert_equal %w[first second third], Strata::Dashboard::Samples.read(table)[:misses].map(&:first).sort
  end

  def test_the_samples_of_several_processes_add_up
    pids = 2.times.map { |n| publishing_child(n) }

    samples = read_samples
    @release_w.close

    assert_equal pids.sort, samples[:processes].map { |process| process[:pid] }.sort
    assert_equal [["shared", 3, 3], ["child-0", 1, 1], ["child-1", 1, 1]], samples[:misses].sort_by { |name, weight, _| [-weight, name] }
    assert_equal [0, 0], pids.map { |pid| reap_child(pid)&.exitstatus }
  end

  # A worker killed (kill -9: no chance to remove its sample) is no longer counted once it is
  # gone, though its sample is still in the table; the live one's still is.
  def test_the_sample_of_a_killed_process_is_left_out_at_once
    killed, alive = 2.times.map { |n| publishing_child(n) }
    assert_equal [alive, killed].sort, read_samples[:processes].map { |process| process[:pid] }.sort

    Process.kill(:KILL, killed)
    status = reap_child(killed) # reaped: a zombie still answers kill(0)
    samples = read_samples

    assert_equal Signal.list.fetch("KILL"), status&.termsig
    assert_equal 2, Strata::CLI::L1Table.new(@l1_path).open { |table, _| Strata::Dashboard::Samples::SLOTS.times.count { |slot| table.get(Strata::Dashboard::Samples.slot_key(slot)) } }
    assert_equal [alive], samples[:processes].map { |process| process[:pid] }
    assert_equal [["child-1", 1, 1], ["shared", 2, 2]], samples[:misses].sort
  end

  def test_a_sample_from_another_host_or_pid_namespace_is_kept_whatever_its_pid
    gone = fork_tracked { true }
    assert_equal 0, reap_child(gone).exitstatus
    here = {"host" => Socket.gethostname, "pid_ns" => Strata::Dashboard::Samples.pid_namespace}
    samples = [here, here.merge("host" => "elsewhere"), here.merge("pid_ns" => "pid:[1]"), {"host" => nil}]
    table = new_store.stack[:l1]
    samples.each_with_index do |sample, slot|
      table.set(Strata::Dashboard::Samples.slot_key(slot), JSON.generate(sample.merge("pid" => gone, "misses" => [["k#{slot}", 1, 1]])))
    end

    assert_equal %w[k1 k2 k3], Strata::Dashboard::Samples.read(table)[:misses].map(&:first).sort
  end

  def test_a_slot_taken_by_another_process_after_it_lapsed_is_given_up_for_a_free_one
    store = new_store
    sampler = start(store, every: 1)
    table = store.stack[:l1]
    store.read("mine")
    assert sampler.publish
    slot = Strata::Dashboard::Samples::SLOTS.times.find { |s| table.get(Strata::Dashboard::Samples.slot_key(s)) }
    table.set(Strata::Dashboard::Samples.slot_key(slot), JSON.generate(pid: Process.pid + 1, misses: [["theirs", 1, 1]]))

    assert sampler.publish

    assert_equal [["mine", 1, 1], ["theirs", 1, 1]], Strata::Dashboard::Samples.read(table)[:misses].sort
  end

  private

  # Forks a process that reads "shared" n + 1 times and "child-n" once, publishes its sample
  # and stays alive until @release_w is closed. Its pid, once it has published.
  def publishing_child(n)
    ready_r, ready_w = IO.pipe
    pid = fork_tracked do
      ready_r.close
      @release_w.close
      store = ActiveSupport::Cache::StrataStore.new(l1: {path: @l1_path, size: TABLE_SIZE})
      sampler = Strata::Dashboard::Sampler.new(table: store.stack[:l1], store_name: store.class.name, every: 1)
      sampler.subscribe
      (n + 1).times { store.read("shared") }
      store.read("child-#{n}")
      ready_w.puts(sampler.publish ? "published" : "not published")
      ready_w.close
      @release_r.read # EOF once the parent closed its end
      sampler.stop
      store.close
      true
    end
    ready_w.close
    assert ready_r.wait_readable(DEADLINE), "child #{pid} did not publish within #{DEADLINE} s"
    assert_equal "published", ready_r.gets&.chomp
    pid
  ensure
    ready_r&.close
  end

  def read_samples
    Strata::CLI::L1Table.new(@l1_path).open { |table, _| Strata::Dashboard::Samples.read(table) }
  end

  def new_store
    store = ActiveSupport::Cache::StrataStore.new(l1: {path: @l1_path, size: TABLE_SIZE})
    @stores << store
    store
  end

  def start(store, every:, clock: Strata::Clock.method(:monotonic))
    sampler = Strata::Dashboard::Sampler.new(table: store.stack[:l1], store_name: store.class.name, every: every, clock: clock)
    @samplers << sampler.subscribe
    sampler
  end
end
