# frozen_string_literal: true

# Who is asking, from the X-Viewer header: "admin", "person:ID" or nobody. The demo trusts the
# header (it has no login): what matters here is that what a viewer may see is the app's rule.
class Viewer
  HEADER = /\Aperson:(\d{1,18})\z/

  attr_reader :person_id

  def initialize(admin:, person_id:)
    @admin = admin
    @person_id = person_id
  end

  ANONYMOUS = new(admin: false, person_id: nil)
  ADMIN = new(admin: true, person_id: nil)

  # The viewer a header names; ArgumentError for anything else.
  def self.from_header(value)
    return ANONYMOUS if value.nil? || value.empty?
    return ADMIN if value == "admin"

    match = HEADER.match(value)
    raise ArgumentError, "X-Viewer must be admin or person:ID, got #{value.inspect}" unless match

    new(admin: false, person_id: match[1].to_i)
  end

  # An owner's email is for admins and the owner.
  def sees_email_of?(bug)
    @admin || bug.owner_id == @person_id
  end
end
