# frozen_string_literal: true

require "json"
require "strata/representation"

# Strata::Representation with records loaded before a change (issue 35, cause 1), for each
# database. The including StoreCase defines ticket_class (a Strata::Model with a title and a
# belongs_to :owner), person_class (the owner: an email), new_ticket(title) and store.
module RepresentationReloadCases
  # Issue 35, cause 1: records loaded (with includes) before a change that commits before the
  # call. The representation reads the tag versions, then loads the misses' rows again with the
  # associations the records given had loaded, and renders those: nothing built from the rows
  # loaded before is cached under the versions after the change.
  def test_a_change_committed_between_the_load_and_the_call_is_not_cached
    ticket = new_ticket("old")
    other = new_ticket("other")
    owner = person_class.create!(email: "owner@example.com")
    ticket_class.where(id: [ticket.id, other.id]).update_all(owner_id: owner.id)
    loaded = -> { ticket_class.includes(:owner).where(id: [ticket.id, other.id]).order(:id).to_a }
    preloaded = []
    reps = Strata::Representation.new(cache: store, name: "ticket/loaded",
      serializer: lambda do |t|
        preloaded << t.association(:owner).loaded?
        {"id" => t.id, "title" => t.title, "owner" => t.owner&.email}
      end)

    before = loaded.call
    ticket_class.find(ticket.id).update!(title: "new") # committed, and invalidated, after the load
    page = JSON.parse(reps.collection(before))
    assert_equal ["new", "other"], page.map { |entry| entry["title"] }, "rendered from the rows loaded again"
    assert_equal [true, true], preloaded, "with the associations the records given had loaded"
    assert_equal ["new", "other"], JSON.parse(reps.collection(loaded.call)).map { |entry| entry["title"] }, "and cached so"

    before = ticket_class.find(other.id)
    ticket_class.find(other.id).update!(title: "other, new")
    assert_equal "other, new", JSON.parse(reps.entry(before))["title"]
    assert_equal "other, new", JSON.parse(reps.entry(ticket_class.find(other.id)))["title"]

    gone = loaded.call
    ticket_class.find(ticket.id).destroy!
    assert_equal ["new", "other, new"], JSON.parse(reps.collection(gone)).map { |entry| entry["title"] }, "a row deleted since: rendered as loaded"
    assert_nil store.read(reps.cache_key(gone.first)), "and not cached"
  end
end
