# frozen_string_literal: true

require "test_helper"
require "strata/meta/host_outages"
require "strata/meta/ring"

# The host's record of memcached outages (Meta::HostOutages) on a real L1 table: the earliest
# outage of a live process is kept, a gone process's record is replaced, an end deletes it, and
# a failure is reported, never raised.
class MetaHostOutagesTest < Minitest::Test
  include Strata::TestSupport

  HostOutages = Strata::Meta::HostOutages
  SERVER = "127.0.0.1:11311"

  def setup
    @dir = private_tmpdir
    @table = Strata::Tiers::SharedMemory.new(path: File.join(@dir, "app.l1"), size: 1 << 20, memo_size: 0)
    @errors = []
    @outages = HostOutages.new(@table, on_error: ->(error, tier) { @errors << [error, tier] })
  end

  def teardown
    @table&.close
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_the_earliest_outage_of_a_live_process_is_kept_until_its_end
    first = Time.at(1_700_000_000, 250, :millisecond)
    @outages.down(SERVER, first)
    @outages.down(SERVER, first + 5)
    assert_equal [1_700_000_000_250, Process.pid], record
    assert_nil @table.keys.find { |key| !key.start_with?("\x00".b) }, "a reserved key only"

    @outages.down(SERVER, first - 1)
    assert_equal [1_699_999_999_250, Process.pid], record, "an outage that began earlier replaces it"

    @outages.up(SERVER)
    assert_nil record
    assert_empty @errors
  end

  # A record left by a process that died while the server was down names an outage nobody
  # sees any more: the next process to mark the server down replaces it, whenever its outage
  # began.
  def test_a_gone_process_record_is_replaced
    gone = Process.fork { exit!(0) }
    Process.wait(gone)
    refute HostOutages.alive?(gone)
    @table.set(HostOutages.key(SERVER), [1_000, gone].pack(HostOutages::PACK))

    since = Time.now
    @outages.down(SERVER, since)

    assert_equal [(since.to_r * 1000).floor, Process.pid], record
  end

  # At a store's close: its own records go, another live process's stay.
  def test_release_deletes_this_process_records_only
    ring = Strata::Meta::Ring.new([SERVER, "127.0.0.1:11312"])
    ring.watcher = @outages
    ring.mark_down(SERVER)
    ring.mark_down("127.0.0.1:11312")
    parent = Process.ppid
    @table.set(HostOutages.key("127.0.0.1:11312"), [1_000, parent].pack(HostOutages::PACK))

    @outages.release(ring)

    assert_nil record
    assert_equal [1_000, parent], HostOutages.decode(@table.get(HostOutages.key("127.0.0.1:11312")))
    assert_nil ring.watcher
  end

  def test_a_failure_is_reported_not_raised
    @table.close

    @outages.down(SERVER, Time.now)
    @outages.up(SERVER)

    assert_equal [:l1, :l1], @errors.map(&:last)
    assert(@errors.all? { |error, _tier| error.is_a?(Strata::Error) })
  end

  def test_what_is_not_a_record_decodes_to_nil
    assert_nil HostOutages.decode(nil)
    assert_nil HostOutages.decode("short")
    assert_nil HostOutages.decode([0, 1].pack(HostOutages::PACK))
    assert_nil HostOutages.decode([1, -1].pack(HostOutages::PACK))
    refute HostOutages.alive?(0)
    refute HostOutages.alive?(-1)
  end

  private

  def record
    HostOutages.decode(@table.get(HostOutages.key(SERVER)))
  end
end
