# frozen_string_literal: true

module Strata
  # The L2 client for memcached's meta protocol (docs/architecture.md). The authority is the
  # protocol.txt shipped with memcached 1.6.18. Request builds request bytes and Response parses
  # reply lines; both are pure and never touch a socket.
  module Meta
  end
end

require "strata/meta/errors"
require "strata/meta/request"
require "strata/meta/response"
require "strata/meta/client"
require "strata/meta/host_outages"
