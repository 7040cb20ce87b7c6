# frozen_string_literal: true

require "test_helper"
require "support/child_processes"

# A table another process replaced (table.h, Caveats: rebuild): the rebuilder retires the old file
# before it renames the new one over it, and every handle still mapping the old file opens the new
# one at its next call, adopting its geometry, so a delete made through it reaches the processes
# that use the new file, and nothing is read from the old one.
class SharedMemoryReplacedTest < Minitest::Test
  include Strata::TestSupport::ChildProcesses

  SIZE = 1024 * 1024
  STATE_OFFSET = 12 # u32 state: 2 ready, 3 retired
  DEADLINE = 10.0

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    @path = File.join(@dir, "replaced.l1")
    @handles = []
  end

  def teardown
    @handles.each(&:close)
    FileUtils.remove_entry(@dir)
  end

  def test_a_handle_on_a_replaced_table_reads_writes_and_deletes_in_the_new_one
    old = open_table(size: SIZE)
    assert old.set("k", "old value")
    rebuilt = open_table(size: 2 * SIZE) # another size: rebuilt, renamed over the path
    assert_nil rebuilt.get("k")
    assert rebuilt.set("k", "new value")

    assert_equal "new value", old.get("k"), "the old handle reads the new table"
    assert_equal 1, old.stats[:reopens]
    assert_equal 2 * SIZE, old.size, "it takes the new table's geometry, so it does not rebuild it back"
    assert old.delete("k")
    assert_nil rebuilt.get("k"), "its delete reached the new table"
    assert old.set("from old", "v")
    assert_equal "v", rebuilt.get("from old")
    assert_equal 0, rebuilt.stats[:reopens]
    assert_equal 1, Dir.children(@dir).size, "one file: nothing left of the old table"
  end

  # The issue's case across processes: a worker keeps its handle; a process with another size
  # rebuilds the file and writes; the worker's delete reaches it and the worker reads nothing old.
  def test_a_worker_process_follows_a_table_another_process_rebuilt
    worker = open_table(size: SIZE)
    assert worker.set("k", "worker's value")
    to_child_r, to_child_w = IO.pipe
    from_child_r, from_child_w = IO.pipe
    pid = fork_child do
      to_child_w.close
      from_child_r.close
      other = open_table(size: 2 * SIZE)
      other.set("k", "other process's value")
      from_child_w.puts "written"
      to_child_r.gets # the worker's delete is done
      gone = other.get("k").nil?
      other.close
      gone
    end
    to_child_r.close
    from_child_w.close
    assert_equal "written\n", from_child_r.gets
    assert_equal "other process's value", worker.get("k")
    assert worker.delete("k")
    to_child_w.puts "deleted"
    status = reap(pid, DEADLINE)
    assert status&.success?, "the rebuilding process no longer sees the key the worker deleted"
  ensure
    [to_child_w, from_child_r].each { |io| io&.close unless io&.closed? }
    kill_and_reap(pid, DEADLINE) if pid && status.nil?
  end

  # The stamp checks read tag versions from the table: after a rebuild they read the new one's.
  def test_a_retired_table_answers_no_stamp_check
    old = open_table(size: SIZE)
    open_table(size: 2 * SIZE)
    assert_nil old.check_stamps("not an entry"), "a check that can't be settled is nil, as before"
    assert_equal 1, old.stats[:reopens]
  end

  # A rebuild that failed after retiring the file leaves it at the path: the next opener rebuilds it.
  def test_a_retired_file_left_at_the_path_is_rebuilt
    table = open_table(size: SIZE)
    assert table.set("k", "v")
    table.close
    @handles.delete(table)
    File.open(@path, "r+b") do |file|
      file.seek(STATE_OFFSET)
      file.write([3].pack("L"))
    end
    messages = []
    logger = Object.new
    logger.define_singleton_method(:warn) { |message| messages << message }
    again = open_table(size: SIZE, logger: logger)
    assert_match(/retired/, messages.join)
    assert_nil again.get("k")
  end

  private

  def open_table(size:, logger: Logger.new(File::NULL)) # the rebuilds' warnings are expected
    table = Strata::Tiers::SharedMemory.new(path: @path, size: size, logger: logger)
    @handles << table
    table
  end
end
