# frozen_string_literal: true

require "openssl"
require "uri"

module Strata
  class Dashboard
    # Who may see the dashboard: a request the app's authorize callable accepts (given the Rack
    # env; the app wraps the dashboard in its own authentication), or one that carries the
    # configured token, as "Authorization: Bearer TOKEN", as a Basic password (any user name:
    # what a browser asks for after a 401 with WWW-Authenticate), as ?token=TOKEN (which also
    # sets a cookie, so that the page's own requests need no token in their URL), or as that
    # cookie. With neither a token nor authorize, every request is refused: a cache's keys leak
    # data.
    #
    # Tokens are compared through their SHA-256 digests with OpenSSL's fixed-length comparison,
    # in time that does not depend on where they differ. The cookie holds a digest derived from
    # the token, not the token, HttpOnly and SameSite=Strict, Secure over HTTPS.
    class Access
      COOKIE = "strata_dashboard"
      MIN_TOKEN_BYTES = 16
      COOKIE_CONTEXT = "strata-dashboard cookie"

      # challenge: the refusal asks for credentials (401 with WWW-Authenticate, a token is
      # configured); else it is final (403).
      Decision = Struct.new(:allowed, :reason, :set_cookie, :challenge)

      def initialize(token:, authorize:)
        if !token.nil? && !(token.is_a?(String) && token.bytesize >= MIN_TOKEN_BYTES)
          raise ArgumentError, "token: must be a String of at least #{MIN_TOKEN_BYTES} bytes"
        end
        raise ArgumentError, "authorize: must respond to call(env)" unless authorize.nil? || authorize.respond_to?(:call)

        @token_digest = token && digest(token)
        @cookie_value = token && OpenSSL::HMAC.hexdigest("SHA256", token, COOKIE_CONTEXT)
        @cookie_digest = @cookie_value && digest(@cookie_value)
        @authorize = authorize
      end

      # A Decision for the request env: allowed, or why not; set_cookie when a ?token= passed.
      def decide(env)
        return Decision.new(true) if @authorize&.call(env)
        unless @token_digest
          reason = @authorize ? "the application's authorization refused this request" : "no token configured"
          return Decision.new(false, reason)
        end

        if matches?(bearer(env), @token_digest) || matches?(basic_password(env), @token_digest) || matches?(cookie(env), @cookie_digest)
          return Decision.new(true)
        end
        return Decision.new(true, nil, set_cookie(env)) if matches?(query_token(env), @token_digest)

        reason = "a valid token is needed (Authorization: Bearer TOKEN, the token as the password, or ?token=TOKEN)"
        reason = "the application's authorization refused this request, and #{reason}" if @authorize
        Decision.new(false, reason, nil, true)
      end

      private

      def digest(string)
        OpenSSL::Digest::SHA256.digest(string)
      end

      def matches?(given, expected)
        given && OpenSSL.fixed_length_secure_compare(digest(given), expected)
      end

      def bearer(env)
        header = env["HTTP_AUTHORIZATION"].to_s
        header.delete_prefix("Bearer ") if header.start_with?("Bearer ")
      end

      # The password of Basic credentials (the user name is not looked at).
      def basic_password(env)
        header = env["HTTP_AUTHORIZATION"].to_s
        return nil unless header.start_with?("Basic ")

        header.delete_prefix("Basic ").unpack1("m").split(":", 2)[1]
      rescue ArgumentError
        nil
      end

      def query_token(env)
        URI.decode_www_form(env["QUERY_STRING"].to_s).reverse_each.find { |name, _| name == "token" }&.last
      rescue ArgumentError # a malformed query names no token
        nil
      end

      def cookie(env)
        env["HTTP_COOKIE"].to_s.split(/;\s*/).reverse_each.find { |pair| pair.start_with?("#{COOKIE}=") }&.split("=", 2)&.last
      end

      def set_cookie(env)
        path = env["SCRIPT_NAME"].to_s
        path = "/" if path.empty?
        secure = (env["rack.url_scheme"] == "https") ? "; Secure" : ""
        "#{COOKIE}=#{@cookie_value}; Path=#{path}; HttpOnly; SameSite=Strict#{secure}"
      end
    end
  end
end
