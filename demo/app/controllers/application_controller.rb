# frozen_string_literal: true

class ApplicationController < ActionController::API
  # A request the app can't answer as asked (a bad header or parameter): 400.
  class BadRequest < StandardError; end

  before_action :tell_worker

  rescue_from ActiveRecord::RecordNotFound do |error|
    render json: {error: error.message}, status: :not_found
  end
  rescue_from ActiveRecord::RecordInvalid do |error|
    render json: {error: error.record.errors.full_messages}, status: :unprocessable_entity
  end
  rescue_from BadRequest, ActionController::ParameterMissing do |error|
    render json: {error: error.message}, status: :bad_request
  end

  private

  # X-Worker-Pid: which Puma worker served the request (the tests check both do).
  def tell_worker
    response.set_header("X-Worker-Pid", Process.pid.to_s)
  end

  def viewer
    Viewer.from_header(request.headers["X-Viewer"])
  rescue ArgumentError => error
    raise BadRequest, error.message
  end

  # The cache the representation reads (BugJson::CACHES): strata unless the bench asks.
  def cache_name
    request.headers["X-Representation-Cache"] || "strata"
  end

  def representation
    BugJson.for(cache_name)
  rescue ArgumentError => error
    raise BadRequest, error.message
  end

  # params[name] as an Integer (default when absent) within range.
  def integer_param(name, default, range)
    value = params.key?(name) ? Integer(params[name], 10) : default
    raise BadRequest, "#{name} must be in #{range}, got #{value}" unless range.cover?(value)

    value
  rescue ArgumentError, TypeError
    raise BadRequest, "#{name} must be an integer, got #{params[name].inspect}"
  end
end
