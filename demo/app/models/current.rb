# frozen_string_literal: true

# Per request: how many entries this request built (BugJson's serializer ran), for the X-Cache
# headers the tests read.
class Current < ActiveSupport::CurrentAttributes
  attribute :builds, default: 0
end
