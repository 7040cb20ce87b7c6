# frozen_string_literal: true

require_relative "model_case"
require "json"
require "minitest/mock"
require "strata/representation"
require_relative "representation_reload_cases"

# Strata::Representation: records' JSON strings cached under their tags, collections joined
# from them, redaction per viewer. Over SQLite models (Strata::Model) and a store over L1.
class StrataRepresentationTest < Strata::ModelCase
  include RepresentationReloadCases

  class Person < Record
    self.table_name = "rep_people"
    include Strata::Model
  end

  class Ticket < Record
    self.table_name = "rep_tickets"
    include Strata::Model

    belongs_to :owner, class_name: "StrataRepresentationTest::Person", optional: true
  end

  class TicketTag < Record
    self.table_name = "rep_ticket_tags"
    include Strata::Model

    belongs_to :ticket
    strata_cascade :ticket
  end

  # Something that is not a row: the protocol gives its key and tags.
  Release = Struct.new(:version, :notes) do
    def strata_cache_key
      "releases/#{version}"
    end

    def strata_cache_tags
      ["releases/#{version}"]
    end
  end

  Viewer = Struct.new(:admin) do
    def admin?
      admin
    end
  end

  ADMIN = Viewer.new(true)
  GUEST = Viewer.new(false)

  def setup
    super
    Record.connection_pool.with_connection do |connection|
      connection.create_table(:rep_people) { |t| t.string :email }
      connection.create_table(:rep_tickets) do |t|
        t.string :title
        t.string :owner_email
        t.references :owner
      end
      connection.create_table(:rep_ticket_tags) do |t|
        t.string :name
        t.references :ticket
      end
    end
    @built = Hash.new(0)
  end

  # Tickets with their tags and owner's email; owner_email is hidden from all but admins.
  def tickets(cache: store, name: "ticket/v1", cache_redacted: false)
    built = @built
    Strata::Representation.new(
      cache: cache, name: name, cache_redacted: cache_redacted,
      serializer: lambda do |ticket|
        built[ticket.id] += 1
        {"id" => ticket.id, "title" => ticket.title, "owner_email" => ticket.owner_email,
         "tags" => TicketTag.where(ticket_id: ticket.id).order(:name).pluck(:name)}
      end,
      hidden: ->(viewer, _ticket) { viewer&.admin? ? nil : ["owner_email"] }
    )
  end

  def ticket_class
    Ticket
  end

  def person_class
    Person
  end

  def new_ticket(title, tags: [])
    ticket = Ticket.create!(title: title, owner_email: "#{title}@example.com")
    tags.each { |name| TicketTag.create!(ticket: ticket, name: name) }
    ticket
  end

  def test_an_entry_is_the_serializers_json_cached_as_a_plain_string
    ticket = new_ticket("crash", tags: ["ui"])
    reps = tickets

    json = reps.entry(ticket, viewer: ADMIN)
    assert_equal({"id" => ticket.id, "title" => "crash", "owner_email" => "crash@example.com", "tags" => ["ui"]}, JSON.parse(json))
    assert_equal json, reps.entry(ticket, viewer: ADMIN)
    assert_equal 1, @built[ticket.id], "the second call hit"

    assert_equal "ticket/v1:rep_tickets/#{ticket.id}", reps.cache_key(ticket)
    assert_equal ["rep_tickets/#{ticket.id}"], reps.cache_tags(ticket)
    bytes = open_table.get(tier_key(store, reps.cache_key(ticket)))
    assert Strata::Entry.stamped?(bytes), "stamped with the ticket's tag"
    assert_equal json, Strata::Entry.plain_string(bytes) { true }, "a plain String, not a serialized object"
  end

  # With the store's fail_safe: and stale_while_revalidate:, an entry and a collection go on
  # answering the last good JSON when the serializer raises (the database is down), and the
  # entry is recomputed by one caller once it works again.
  def test_the_stores_fail_safe_and_revalidation_reach_entries_and_collections
    cache = build_store(expires_in: 60, fail_safe: 3600, stale_while_revalidate: 60)
    down = false
    reps = Strata::Representation.new(cache: cache, name: "ticket/v1", serializer: lambda do |ticket|
      raise IOError, "the database is down" if down

      {"id" => ticket.id, "title" => ticket.title}
    end)
    ticket = new_ticket("crash")
    good = reps.entry(ticket)
    page = reps.collection([ticket])

    travel 90.seconds do
      down = true
      capture_reports do
        assert_equal good, reps.entry(ticket), "the last good entry"
        assert_equal page, reps.collection([ticket]), "the last good collection"
      end
    end
    travel 100.seconds do
      down = false
      ticket.update!(title: "crash, fixed")
      assert_equal "crash, fixed", JSON.parse(reps.entry(ticket))["title"], "a change is never answered stale"
    end
  end

  # A soft invalidation of a record's tag: the call that takes the entry's claim renders it
  # again from the row loaded anew, while a call meanwhile (another thread, inside the
  # serializer) answers it stale; an entry call and a collection alike.
  def test_a_soft_invalidation_renders_an_entry_once_while_others_answer_it_stale
    meanwhile = nil
    other = nil
    reps = Strata::Representation.new(cache: store, name: "ticket/v1", serializer: lambda do |row|
      meanwhile = Thread.new { other.call }.value if row.title.end_with?("fixed") && meanwhile.nil?
      {"id" => row.id, "title" => row.title}
    end)
    # A ticket each: a claim whose value was written stays until it lapses.
    entry = new_ticket("crash")
    listed = new_ticket("hang")
    {entry: [entry, -> { reps.entry(entry) }], collection: [listed, -> { reps.collection([listed]) }]}.each do |call, (ticket, other_call)|
      old = other_call.call
      meanwhile = nil
      other = other_call
      Ticket.where(id: ticket.id).update_all(title: "#{call} fixed") # no callbacks: no hard invalidation
      store.invalidate_tags(ticket.cache_tag, soft: true)

      assert_includes other_call.call, "#{call} fixed", "#{call}: rendered again from the row loaded anew"
      assert_equal old, meanwhile, "#{call}: answered stale meanwhile"
      assert_includes other_call.call, "#{call} fixed", "#{call}: cached"
    end
  end

  def test_values_are_made_json_as_rails_makes_them
    reps = Strata::Representation.new(cache: store, name: "release/v1",
      serializer: ->(release) { {version: release.version, at: Time.utc(2026, 11, 25, 19, 30), kind: :major, size: 1.5} })

    assert_equal "{\"version\":\"1.0\",\"at\":\"2026-11-25T19:30:00.000Z\",\"kind\":\"major\",\"size\":1.5}",
      reps.entry(Release.new("1.0"))
  end

  def test_another_name_is_another_entry
    ticket = new_ticket("crash")
    tickets.entry(ticket, viewer: ADMIN)
    tickets(name: "ticket/v2").entry(ticket, viewer: ADMIN)

    assert_equal 2, @built[ticket.id], "a new serializer version builds anew"
  end

  def test_adding_a_tag_changes_the_entry_and_a_collection_on_the_next_call
    ticket = new_ticket("crash", tags: ["ui"])
    other = new_ticket("hang")
    reps = tickets
    reps.entry(ticket, viewer: ADMIN)
    reps.collection([ticket, other], viewer: ADMIN)

    TicketTag.create!(ticket: ticket, name: "urgent")
    assert_equal ["ui", "urgent"], JSON.parse(reps.entry(ticket, viewer: ADMIN))["tags"], "the cascade invalidated the ticket"
    page = JSON.parse(reps.collection([ticket, other], viewer: ADMIN))
    assert_equal [["ui", "urgent"], []], page.map { |entry| entry["tags"] }
    assert_equal 1, @built[other.id], "the other ticket's entry still hit"
  end

  def test_updating_a_record_changes_its_entry_and_a_collection_on_the_next_call
    ticket = new_ticket("crash")
    other = new_ticket("hang")
    reps = tickets
    reps.collection([ticket, other], viewer: GUEST)

    ticket.update!(title: "crash on start")
    assert_equal "crash on start", JSON.parse(reps.entry(ticket, viewer: GUEST))["title"]
    assert_equal ["crash on start", "hang"], JSON.parse(reps.collection([ticket, other], viewer: GUEST)).map { |entry| entry["title"] }
    assert_equal [2, 1], [@built[ticket.id], @built[other.id]]
  end

  def test_a_rolled_back_change_changes_nothing
    ticket = new_ticket("crash", tags: ["ui"])
    reps = tickets
    before = reps.entry(ticket, viewer: ADMIN)

    Ticket.transaction do
      ticket.update!(title: "renamed")
      TicketTag.create!(ticket: ticket, name: "urgent")
      inside = JSON.parse(reps.entry(ticket, viewer: ADMIN))
      assert_equal ["renamed", ["ui", "urgent"]], inside.values_at("title", "tags"), "inside, the transaction's own changes"
      raise ActiveRecord::Rollback
    end

    assert_equal before, reps.entry(ticket, viewer: ADMIN), "the entry from before the transaction"
    assert_equal 2, @built[ticket.id], "built once more inside the transaction, and that build was not cached"
  end

  def test_a_document_built_before_a_change_is_not_served_after_it
    ticket = new_ticket("crash")
    read = Queue.new
    go_on = Queue.new
    reps = Strata::Representation.new(cache: store, name: "ticket/v1",
      serializer: lambda do |item|
        title = Ticket.find(item.id).title
        read << title
        go_on.pop
        {"title" => title}
      end)

    slow = Thread.new { Record.connection_pool.with_connection { reps.entry(ticket) } }
    assert_equal "crash", read.pop, "the serializer read the row"
    ticket.update!(title: "crash on start") # committed while the document is being built
    go_on << true
    assert_equal "{\"title\":\"crash\"}", slow.value, "the slow caller gets what it built"

    go_on << true
    assert_equal "{\"title\":\"crash on start\"}", reps.collection([ticket]).delete_prefix("[").delete_suffix("]"),
      "the next call builds again: the entry was stamped with the version read before the build"
    assert_equal "crash on start", read.pop
  end

  def test_a_viewer_who_may_see_everything_gets_the_cached_string_unparsed
    first = new_ticket("crash", tags: ["ui"])
    second = new_ticket("hang")
    reps = tickets
    reps.collection([first, second], viewer: ADMIN)
    cached = [first, second].map { |ticket| store.read(reps.cache_key(ticket)) }

    JSON.stub(:parse, ->(*) { flunk "an entry the viewer may fully see was parsed" }) do
      assert_equal cached[0], reps.entry(first, viewer: ADMIN)
      page = reps.collection([first, second], viewer: ADMIN, envelope: {"total_size" => 2})
      assert_equal "{\"total_size\":2,\"entries\":[#{cached.join(",")}]}", page, "the cached strings, joined"
    end
  end

  def test_a_redacted_field_never_reaches_a_viewer_who_may_not_see_it
    first = new_ticket("crash", tags: ["ui"])
    second = new_ticket("hang")
    reps = tickets
    original = JSON.method(:parse)
    parsed = 0
    counting = lambda do |*args, **options|
      parsed += 1
      original.call(*args, **options)
    end

    entry, page = JSON.stub(:parse, counting) do
      [reps.entry(first, viewer: GUEST), reps.collection([first, second], viewer: nil, envelope: {"start" => 0})]
    end
    assert_equal 3, parsed, "only the redacted entries were parsed"
    [entry, page].each do |json|
      refute_includes json, "owner_email"
      refute_includes json, "@example.com"
    end
    assert_equal({"id" => first.id, "title" => "crash", "tags" => ["ui"]}, JSON.parse(entry))
    assert_equal ["crash", "hang"], JSON.parse(page)["entries"].map { |item| item["title"] }
    assert_includes store.read(reps.cache_key(first)), "crash@example.com", "the cache keeps the full entry"
    assert_includes reps.entry(first, viewer: ADMIN), "crash@example.com", "for those who may see it"
  end

  def test_redacted_copies_may_be_cached_and_follow_their_record
    first = new_ticket("crash", tags: ["ui"])
    second = new_ticket("hang")
    reps = tickets(cache_redacted: true)
    original = JSON.method(:parse)
    parsed = 0
    counting = lambda do |*args, **options|
      parsed += 1
      original.call(*args, **options)
    end

    pages = JSON.stub(:parse, counting) do
      reps.entry(first, viewer: GUEST)
      Array.new(2) { reps.collection([first, second], viewer: GUEST, envelope: {"start" => 0}) }
    end
    assert_equal 2, parsed, "each redacted copy was made once, then read from the cache"
    assert_equal pages[0], pages[1]
    refute_includes pages[0], "@example.com"
    assert_equal [1, 1], [@built[first.id], @built[second.id]], "from the full entries"
    assert_includes reps.entry(first, viewer: ADMIN), "crash@example.com"
    assert_includes store.read(reps.cache_key(first)), "crash@example.com", "the full entry is kept apart"

    TicketTag.create!(ticket: first, name: "urgent")
    assert_equal [["ui", "urgent"], []], JSON.parse(reps.collection([first, second], viewer: GUEST)).map { |entry| entry["tags"] }
    assert_equal ["ui", "urgent"], JSON.parse(reps.entry(first, viewer: ADMIN))["tags"]
    refute_includes reps.entry(first, viewer: GUEST), "@example.com"
    assert_equal [2, 1], [@built[first.id], @built[second.id]], "the copy was made from the new full entry"
  end

  def test_each_set_of_hidden_fields_has_its_own_copy
    ticket = new_ticket("crash")
    reps = Strata::Representation.new(cache: store, name: "ticket/v1", cache_redacted: true,
      serializer: ->(item) { {"title" => item.title, "owner_email" => item.owner_email, "id" => item.id} },
      hidden: ->(viewer, _item) { viewer })

    assert_equal "{\"title\":\"crash\",\"id\":#{ticket.id}}", reps.entry(ticket, viewer: ["owner_email"])
    assert_equal "{\"id\":#{ticket.id}}", reps.entry(ticket, viewer: [:owner_email, "title"])
    assert_equal "{\"id\":#{ticket.id}}", reps.entry(ticket, viewer: ["title", "owner_email"]), "the same set"
    assert_equal "{\"owner_email\":\"crash@example.com\",\"id\":#{ticket.id}}", reps.entry(ticket, viewer: "title")
    assert_equal "[{\"title\":\"crash\",\"owner_email\":\"crash@example.com\",\"id\":#{ticket.id}}]", reps.collection([ticket], viewer: nil)
  end

  def test_hidden_decides_per_record
    mine = new_ticket("mine")
    theirs = new_ticket("theirs")
    reps = Strata::Representation.new(cache: store, name: "ticket/v1",
      serializer: ->(ticket) { {"title" => ticket.title, "owner_email" => ticket.owner_email} },
      hidden: ->(viewer, ticket) { (viewer == ticket.owner_email) ? [] : [:owner_email] })

    page = JSON.parse(reps.collection([mine, theirs], viewer: "mine@example.com"))
    assert_equal [{"title" => "mine", "owner_email" => "mine@example.com"}, {"title" => "theirs"}], page
  end

  def test_a_collection_reads_its_page_once_and_builds_only_the_misses
    cached = new_ticket("cached")
    missing = new_ticket("missing")
    reps = tickets
    reps.entry(cached, viewer: ADMIN)

    reads = capture_events("cache_read_multi.active_support") do
      events = capture_events(Strata::Representation::COLLECTION_EVENT) do
        reps.collection([cached, missing], viewer: GUEST)
      end
      assert_equal [{name: "ticket/v1", hits: 1, misses: 1, redacted: 2, size: 2}], events
    end
    assert_equal 1, reads.size, "one read_multi for the page"
    assert_equal [1, 1], [@built[cached.id], @built[missing.id]]
  end

  def test_an_entry_emits_its_event
    ticket = new_ticket("crash")
    reps = tickets

    events = capture_events(Strata::Representation::ENTRY_EVENT) do
      reps.entry(ticket, viewer: GUEST)
      reps.entry(ticket, viewer: ADMIN)
    end
    assert_equal [{name: "ticket/v1", hits: 0, misses: 1, redacted: 1}, {name: "ticket/v1", hits: 1, misses: 0, redacted: 0}], events
  end

  def test_envelopes_and_lists
    ticket = new_ticket("crash")
    reps = tickets
    entry = reps.entry(ticket, viewer: ADMIN)

    assert_equal "[#{entry}]", reps.collection([ticket], viewer: ADMIN)
    assert_equal "[]", reps.collection([], viewer: ADMIN)
    assert_equal "{\"entries\":[]}", reps.collection([], envelope: {})
    assert_equal "{\"total_size\":1,\"start\":0,\"items\":[#{entry}]}",
      reps.collection(Ticket.where(id: ticket.id), viewer: ADMIN, envelope: {total_size: 1, start: 0}, entries_key: "items")
    named = Strata::Representation.new(cache: store, name: "ticket/v1", serializer: ->(_) { {} }, entries_key: :rows)
    assert_equal "{\"a\":\"}\",\"at\":\"2026-11-25T19:30:00.000Z\",\"rows\":[#{entry},#{entry}]}",
      named.collection([ticket, ticket], envelope: {"a" => "}", :at => Time.utc(2026, 11, 25, 19, 30)})

    error = assert_raises(ArgumentError) { reps.collection([ticket], envelope: {entries: 1}) }
    assert_match(/envelope: has a "entries" key already/, error.message)
    assert_raises(ArgumentError) { reps.collection([ticket], envelope: [1]) }
    assert_raises(ArgumentError) { reps.collection([ticket], entries_key: "") }
  end

  def test_an_object_that_is_not_a_row_uses_the_protocol
    built = 0
    reps = Strata::Representation.new(cache: store, name: "release/v1",
      serializer: ->(release) { {"version" => release.version, "notes" => release.notes}.tap { built += 1 } })
    release = Release.new("1.0", "first")

    assert_equal "{\"version\":\"1.0\",\"notes\":\"first\"}", reps.entry(release)
    assert_equal "release/v1:releases/1.0", reps.cache_key(release)
    release.notes = "first, amended"
    assert_equal "[{\"version\":\"1.0\",\"notes\":\"first\"}]", reps.collection([release]), "cached until its tag changes"

    store.invalidate_tags("releases/1.0")
    assert_equal "[{\"version\":\"1.0\",\"notes\":\"first, amended\"}]", reps.collection([release])
    assert_equal 2, built
  end

  def test_a_model_may_give_its_own_tags
    person = Person.create!(email: "a@example.com")
    ticket = Ticket.create!(title: "crash", owner: person)
    ticket.define_singleton_method(:strata_cache_tags) { [cache_tag, owner.cache_tag] }
    reps = Strata::Representation.new(cache: store, name: "ticket/v1",
      serializer: ->(item) { {"title" => item.title, "owner" => item.owner.reload.email} })
    reps.entry(ticket)

    person.update!(email: "b@example.com")
    assert_equal "{\"title\":\"crash\",\"owner\":\"b@example.com\"}", reps.entry(ticket)
  end

  def test_what_the_serializer_reads_from_the_cache_is_a_dependency
    person = Person.create!(email: "a@example.com")
    ticket = Ticket.create!(title: "crash", owner: person)
    reps = Strata::Representation.new(cache: store, name: "ticket/v1",
      serializer: lambda do |item|
        owner = store.fetch("person/#{item.owner_id}", tags: item.owner.cache_tag) { item.owner.reload.email }
        {"title" => item.title, "owner" => owner}
      end)
    reps.entry(ticket)

    person.update!(email: "b@example.com")
    assert_equal "{\"title\":\"crash\",\"owner\":\"b@example.com\"}", reps.collection([ticket]).delete_prefix("[").delete_suffix("]")
  end

  def test_objects_without_a_key_are_refused
    reps = tickets

    error = assert_raises(ArgumentError) { reps.entry(Object.new) }
    assert_match(/Object has no representation key: it responds to no strata_cache_key/, error.message)
    error = assert_raises(ArgumentError) { reps.collection([new_ticket("ok"), 42]) }
    assert_match(/Integer has no representation key/, error.message)
    error = assert_raises(ArgumentError) { reps.entry(Ticket.new(title: "unsaved")) }
    assert_match(/without an id/, error.message)
    keyed = Struct.new(:strata_cache_key).new(7)
    error = assert_raises(ArgumentError) { reps.entry(keyed) }
    assert_match(/strata_cache_key must return a non-empty String, got 7/, error.message)
    untagged = Struct.new(:strata_cache_key).new("x/1")
    error = assert_raises(ArgumentError) { reps.entry(untagged) }
    assert_match(/responds to no strata_cache_tags/, error.message)
  end

  def test_bad_options_are_refused
    serializer = ->(_) { {} }
    error = assert_raises(ArgumentError) { Strata::Representation.new(cache: ActiveSupport::Cache::MemoryStore.new, name: "x", serializer: serializer) }
    assert_match(/MemoryStore can't keep tags/, error.message)
    assert_raises(ArgumentError) { Strata::Representation.new(cache: store, name: "", serializer: serializer) }
    error = assert_raises(ArgumentError) { Strata::Representation.new(cache: store, name: "bug:v1", serializer: serializer) }
    assert_match(/without a colon or a NUL byte/, error.message)
    assert_raises(ArgumentError) { Strata::Representation.new(cache: store, name: "x", serializer: nil) }
    assert_raises(ArgumentError) { Strata::Representation.new(cache: store, name: "x", serializer: serializer, hidden: 1) }

    listed = Strata::Representation.new(cache: store, name: "x", serializer: ->(_) { [1] })
    error = assert_raises(TypeError) { listed.entry(new_ticket("crash")) }
    assert_match(/serializer returned a Array for a StrataRepresentationTest::Ticket, not a Hash/, error.message)
  end

  def test_hits_misses_and_redaction_leave_ruby_vm_stat_unchanged
    releases = Array.new(20) { |i| Release.new("1.#{i}", "notes #{i}") }
    both = [false, true].map do |cache_redacted|
      Strata::Representation.new(cache: store, name: "release/v1", cache_redacted: cache_redacted,
        serializer: ->(release) { {"version" => release.version, "notes" => release.notes} },
        hidden: ->(viewer, _release) { viewer ? nil : ["notes"] })
    end
    work = lambda do |round|
      store.invalidate_tags("releases/1.#{round % 20}")
      both.each do |reps|
        reps.entry(releases[round % 20], viewer: round.even?)
        reps.collection(releases, viewer: round.odd?, envelope: {"total_size" => 20, "start" => round})
      end
    end
    50.times(&work) # warm every path
    before = Strata::TestSupport.vm_cache_state

    200.times(&work)

    assert_equal before, Strata::TestSupport.vm_cache_state
  end

  def test_a_second_host_reads_the_page_from_memcached_and_sees_a_change
    namespace = "t#{SecureRandom.hex(6)}"
    servers = Strata::TestSupport.memcached_servers
    host_a = build_store(l1: {path: File.join(@tmpdir, "host-a.l1")}, namespace: namespace, memcached: {servers: servers})
    host_b = build_store(l1: {path: File.join(@tmpdir, "host-b.l1")}, namespace: namespace, memcached: {servers: servers},
      coherence_interval: 0.05)
    Strata::Model.cache_store = host_a
    first = new_ticket("crash")
    second = new_ticket("hang")
    page = tickets(cache: host_a).collection([first, second], viewer: ADMIN)

    assert_equal page, tickets(cache: host_b).collection([first, second], viewer: ADMIN)
    assert_equal [1, 1], [@built[first.id], @built[second.id]], "host b built nothing"

    first.update!(title: "crash on start")
    fresh = wait_until { tickets(cache: host_b).collection([first, second], viewer: ADMIN).include?("crash on start") }
    assert fresh, "host b sees the change within its coherence interval"
  end
end
