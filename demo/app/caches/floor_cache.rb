# frozen_string_literal: true

# The bench's floor (X-Representation-Cache: floor): not a cache store but the least a cache
# can do for Strata::Representation, a frozen Hash lookup per key with no key normalization,
# no entry, no copy and no instrumentation. A page through it costs what the app spends around
# the cache (the query for the page's rows, their keys, joining the strings, Rack and Puma), so
# its page/entry ratio is the best any cache can reach in this app. Nothing invalidates it
# but invalidate_tags, which empties it: only for measuring.
class FloorCache
  def initialize
    @strings = {}
  end

  def read_multi(*keys)
    keys.each_with_object({}) do |key, found|
      string = @strings[key]
      found[key] = string if string
    end
  end

  def fetch(key, tags: nil)
    @strings[key] ||= yield.freeze
  end

  def invalidate_tags(*)
    @strings = {}
    true
  end
end
