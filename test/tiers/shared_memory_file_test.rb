# frozen_string_literal: true

require "test_helper"
require "support/child_processes"

# The table file (layout and caveats in ext/strata/table.h): a table that fails validation is
# rebuilt, never trusted, and the rebuild is logged; a file that is not a table, or that another
# user could have read or written (through the file or its directory), is refused and left alone;
# new files are private.
class SharedMemoryFileTest < Minitest::Test
  include Strata::TestSupport::ChildProcesses

  SIZE = 1024 * 1024
  MAGIC_OFFSET = 0   # u64 "STRATAL1"
  VERSION_OFFSET = 8 # u32 layout version
  STATE_OFFSET = 12  # u32 state: 1 while being built, 2 when ready
  HEADER_BYTES = 4096
  DEADLINE = 10.0

  # A logger that keeps what it was told.
  class RecordingLogger
    attr_reader :messages

    def initialize
      @messages = []
    end

    %i[debug info warn error fatal].each do |level|
      define_method(level) do |message = nil, &block|
        @messages << [level, message || block&.call]
        true
      end
    end

    def warnings
      @messages.filter_map { |level, message| message if level == :warn }
    end
  end

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    @path = File.join(@dir, "file.strata")
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  # The control case for every rebuild below: a valid file reopens with its data and no warning.
  def test_valid_file_reopens_with_its_data_and_no_warning
    build_with_data
    logger = RecordingLogger.new
    table = open_table(logger: logger)
    assert_equal "survives", table.get("old")
    assert_empty logger.warnings
    table.close
  end

  # A second handle opened while the first is still open (table.h, Caveats: the same file opened
  # twice in one process works) attaches to the same table: an open must not keep the file's build
  # lock once it returns.
  def test_file_opens_again_while_a_handle_is_open
    first = open_table
    assert first.set("k", "v")
    logger = RecordingLogger.new
    second = open_table(logger: logger)
    assert_equal "v", second.get("k")
    assert second.set("k2", "v2")
    assert_equal "v2", first.get("k2")
    assert_empty logger.warnings
    second.close
    first.close
  end

  def test_truncated_file_is_rebuilt
    build_with_data
    File.truncate(@path, SIZE / 2)
    assert_rebuilt(reason: /truncat/i)
  end

  def test_file_cut_inside_the_header_is_rebuilt
    build_with_data
    File.truncate(@path, 100)
    assert_rebuilt(reason: /truncat/i)
  end

  # An empty file is what any opener sees of a file just created, so table.h builds it in place
  # without a warning (there is nothing in it to lose). It must still come out whole and private.
  def test_zero_length_file_is_built
    File.open(@path, File::WRONLY | File::CREAT | File::EXCL, 0o600) {}
    assert_rebuilt(warns: false)
    assert_equal SIZE, File.size(@path)
  end

  # Only a file that carries the table's magic number (or an empty one) is ever rebuilt: anything
  # else at the path is somebody's data, and the open says so, naming the path.
  def test_damaged_magic_is_refused_and_left_alone
    build_with_data
    overwrite(MAGIC_OFFSET, "NOTSTRAT")
    assert_foreign
  end

  def test_file_that_is_not_a_table_is_refused_and_left_alone
    File.write(@path, "somebody's notes\n", perm: 0o600)
    assert_foreign
    File.write(@path, "abc", perm: 0o600) # shorter than the magic number
    assert_foreign
  end

  def test_foreign_layout_version_is_rebuilt
    build_with_data
    version = File.binread(@path, 4, VERSION_OFFSET).unpack1("L")
    overwrite(VERSION_OFFSET, [version + 1].pack("L"))
    assert_rebuilt(reason: /version/i)
  end

  def test_unfinished_build_is_rebuilt
    build_with_data
    overwrite(STATE_OFFSET, [1].pack("L"))
    assert_rebuilt(reason: /complet|initiali[sz]/i)
  end

  def test_random_garbage_header_is_refused_and_left_alone
    build_with_data
    overwrite(0, Random.new(42).bytes(HEADER_BYTES))
    assert_foreign
  end

  # Garbage that keeps the magic and version, so only the later checks can catch it.
  def test_garbage_after_magic_and_version_is_rebuilt
    build_with_data
    overwrite(16, Random.new(7).bytes(HEADER_BYTES - 16))
    assert_rebuilt
  end

  def test_different_size_rebuilds
    build_with_data
    assert_rebuilt(size: 2 * SIZE, reason: /geometry/i)
  end

  def test_different_shard_count_rebuilds
    build_with_data(shards: 2)
    assert_rebuilt(shards: 1, reason: /geometry/i)
  end

  def test_new_file_is_private_whatever_the_umask
    old_umask = File.umask(0)
    open_table.close
    assert_equal 0o600, File.stat(@path).mode & 0o777
  ensure
    File.umask(old_umask)
  end

  def test_rebuilt_file_is_private_whatever_the_umask
    build_with_data
    overwrite(STATE_OFFSET, [1].pack("L"))
    old_umask = File.umask(0)
    open_table(logger: RecordingLogger.new).close
    stat = File.stat(@path)
    assert_equal 0o600, stat.mode & 0o777
    assert_equal Process.uid, stat.uid
    assert stat.file?
  ensure
    File.umask(old_umask) if old_umask
  end

  def test_file_owned_by_another_user_is_refused_and_left_alone
    build_with_data
    File.chown(65_534, 65_534, @path)
    assert_refused
  end

  def test_world_writable_file_is_refused_and_left_alone
    build_with_data
    File.chmod(0o666, @path)
    assert_refused
  end

  def test_group_writable_file_is_refused_and_left_alone
    build_with_data
    File.chmod(0o620, @path)
    assert_refused
  end

  # Anyone who can read the table reads every cached value.
  def test_group_readable_file_is_refused_and_left_alone
    build_with_data
    File.chmod(0o640, @path)
    assert_refused
  end

  def test_world_readable_file_is_refused_and_left_alone
    build_with_data
    File.chmod(0o604, @path)
    assert_refused
  end

  # A second name for the table is one a rebuild would not replace, in a place we may not control.
  def test_file_with_a_second_hard_link_is_refused_by_either_name
    build_with_data
    other = File.join(@dir, "other-name.strata")
    File.link(@path, other)
    assert_refused
    assert_raises(Strata::UnsafeFileError) { open_table(path: other) }
    File.unlink(other)
    open_table.close
  end

  # The directory decides who can plant, replace or remove the table: it must be ours and writable
  # by nobody else, and is never reached through a symlink.
  def test_world_writable_directory_is_refused
    build_with_data
    File.chmod(0o777, @dir)
    assert_refused
  ensure
    File.chmod(0o700, @dir)
  end

  def test_group_writable_directory_is_refused
    build_with_data
    File.chmod(0o770, @dir)
    assert_refused
  ensure
    File.chmod(0o700, @dir)
  end

  def test_directory_owned_by_another_user_is_refused
    skip "needs root to give a directory away" unless Process.euid.zero?
    sub = File.join(@dir, "theirs")
    Dir.mkdir(sub, 0o700)
    path = File.join(sub, "file.strata")
    build_with_data(path: path)
    File.chown(65_534, 65_534, sub)
    before = File.binread(path)
    error = assert_raises(Strata::UnsafeFileError) { open_table(path: path) }
    assert_includes error.message, path
    assert_equal before, File.binread(path)
    refute File.exist?(File.join(sub, "new.strata"))
    assert_raises(Strata::UnsafeFileError) { open_table(path: File.join(sub, "new.strata")) }
    refute File.exist?(File.join(sub, "new.strata")), "a table was created in another user's directory"
  end

  # A symlinked parent (say /dev/shm/strata-<uid> planted as a link to somewhere else) is refused,
  # and nothing at the link's target is built, rebuilt or replaced through it.
  def test_symlinked_directory_is_refused_and_its_target_left_alone
    real = File.join(@dir, "real")
    Dir.mkdir(real, 0o700)
    target = File.join(real, "file.strata")
    build_with_data(path: target)
    overwrite(VERSION_OFFSET, [0xdead].pack("L"), path: target) # a rebuild would replace it
    File.write(File.join(real, "victim.strata"), "precious\n", perm: 0o600)
    via = File.join(@dir, "via")
    File.symlink(real, via)
    before = File.binread(target)
    inode = File.stat(target).ino
    %w[file.strata victim.strata new.strata].each do |name|
      assert_raises(Strata::UnsafeFileError) { open_table(path: File.join(via, name)) }
    end
    assert_equal [before, inode], [File.binread(target), File.stat(target).ino], "the target was rebuilt"
    assert_equal "precious\n", File.read(File.join(real, "victim.strata"))
    refute File.exist?(File.join(real, "new.strata")), "a table was created through the link"
  end

  # A symlink is refused (table.h) or replaced; its target is never written through.
  def test_symlink_to_a_table_is_not_followed
    target = File.join(@dir, "target.strata")
    build_with_data(path: target)
    File.symlink(target, @path)
    before = File.binread(target)
    opened = open_or_refuse
    opened&.set("through-link", "x")
    opened&.close
    assert_equal before, File.binread(target), "the symlink's target was written"
    assert File.symlink?(@path) || !opened.nil?, "a refused open left the link alone"
  end

  def test_symlink_to_a_plain_file_is_not_followed
    target = File.join(@dir, "victim.txt")
    File.write(target, "precious\n")
    File.chmod(0o600, target)
    File.symlink(target, @path)
    opened = open_or_refuse
    opened&.close
    assert_equal "precious\n", File.read(target), "the symlink's target was written"
  end

  def test_dangling_symlink_does_not_create_its_target
    target = File.join(@dir, "created-through-link")
    File.symlink(target, @path)
    opened = open_or_refuse
    opened&.close
    refute File.exist?(target), "the table was created through a dangling symlink"
  end

  def test_directory_at_path_is_refused
    Dir.mkdir(@path, 0o700)
    assert_raises(Strata::Error) { open_table }
    assert File.directory?(@path)
  end

  # Opening a FIFO for reading can block forever; the check runs in a child so a hang fails the
  # test instead of stalling the run.
  def test_fifo_at_path_is_refused_without_hanging
    File.mkfifo(@path, 0o600)
    pid = fork_child do
      open_table
      false
    rescue Strata::Error
      true
    end
    status = reap(pid, DEADLINE)
    refute_nil status, "opening a FIFO hung"
    assert status.success?, "a FIFO at path raises a Strata::Error (exit 1: it opened, #{RAISED}: another error)"
  ensure
    kill_and_reap(pid, DEADLINE) if pid && status.nil?
  end

  private

  def open_table(path: @path, size: SIZE, shards: nil, logger: nil)
    Strata::Tiers::SharedMemory.new(path: path, size: size, shards: shards, logger: logger)
  end

  def build_with_data(path: @path, shards: nil)
    table = open_table(path: path, shards: shards)
    assert table.set("old", "survives")
    table.close
  end

  def overwrite(offset, bytes, path: @path)
    File.open(path, "r+b") do |file|
      file.seek(offset)
      file.write(bytes)
    end
  end

  # Opening detects the bad file, logs a warning (naming the reason, when given: a loose match on
  # table.c's wording, so that each damage is caught by the check meant for it), and gives a
  # working, empty, private table.
  def assert_rebuilt(warns: true, reason: nil, size: SIZE, shards: nil)
    logger = RecordingLogger.new
    table = open_table(size: size, shards: shards, logger: logger)
    refute_empty logger.warnings, "a rebuild is logged as a warning" if warns
    assert_match reason, logger.warnings.join("\n") if reason
    assert_nil table.get("old"), "old data is gone after a rebuild"
    assert_equal [], table.keys
    assert table.set("new", "works")
    assert_equal "works", table.get("new")
    assert_equal 0o600, File.stat(@path).mode & 0o777
    table.close
    logger = RecordingLogger.new
    again = open_table(size: size, shards: shards, logger: logger)
    assert_equal "works", again.get("new"), "the rebuilt file is valid on the next open"
    assert_empty logger.warnings, "the rebuilt file is not rebuilt again"
    again.close
  end

  # The open raises UnsafeFileError and the file is untouched: not rebuilt, not written.
  def assert_refused
    before = File.binread(@path)
    stat = File.stat(@path)
    logger = RecordingLogger.new
    assert_raises(Strata::UnsafeFileError) { open_table(logger: logger) }
    assert_equal before, File.binread(@path), "a refused file was modified"
    after = File.stat(@path)
    assert_equal [stat.ino, stat.uid, stat.mode], [after.ino, after.uid, after.mode], "a refused file was replaced"
  end

  # The open raises TierError naming the path (it is not our file to rebuild) and the file is
  # untouched.
  def assert_foreign
    before = File.binread(@path)
    inode = File.stat(@path).ino
    logger = RecordingLogger.new
    error = assert_raises(Strata::TierError) { open_table(logger: logger) }
    assert_includes error.message, @path
    assert_match(/not a Strata table/, error.message)
    assert_empty logger.warnings
    assert_equal [before, inode], [File.binread(@path), File.stat(@path).ino], "a foreign file was modified"
  end

  # The table, or nil if the open raised UnsafeFileError.
  def open_or_refuse
    open_table(logger: RecordingLogger.new)
  rescue Strata::UnsafeFileError
    nil
  end
end
