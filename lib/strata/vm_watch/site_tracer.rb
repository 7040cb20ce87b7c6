# frozen_string_literal: true

require "rbconfig"
require_relative "counters"
require_relative "report"

module Strata
  class VMWatch
    # Debug mode: finds the call sites that moved the VM cache counters, on one thread.
    #
    # A TracePoint sees every call and return of the methods that can invalidate (WATCHED) and
    # reads the counters on both sides; a call is a site only if the counters grew while it ran,
    # so the many harmless calls of those methods (most `new`s) cost a read and are forgotten.
    # Nested watched calls (OpenStruct.new runs define_singleton_method) are charged once, to
    # the innermost call that moved them; the outer one keeps only what its children did not
    # explain. A class or module body (`class Foo`) creates its class before the :class event
    # fires, so it is charged with what moved since the previous watched event.
    #
    # Not seen: a constant assigned with `X = ...` (no call to trace), and other threads' work
    # (RubyVM.stat is process-wide); the Report shows that part as not attributed.
    #
    # Cost: the hook runs on every C and Ruby method call of the watched thread while enabled,
    # which slows it several times over. Not for production traffic.
    class SiteTracer
      WATCHED = %i[
        new define dup clone
        extend include prepend singleton_class
        define_method define_singleton_method alias_method remove_method undef_method
        attr_accessor attr_reader attr_writer
        instance_eval instance_exec class_eval class_exec module_eval module_exec
        const_set remove_const public_constant private_constant deprecate_constant autoload
        class_variable_set remove_class_variable
        load require require_relative
      ].to_h { |name| [name, true] }.freeze

      # Bounds: watched calls nest at most this deep before the deeper ones go untraced, and a
      # report keeps at most MAX_SITES distinct sites (the rest counts as not attributed).
      MAX_DEPTH = 256
      MAX_SITES = 32

      # This watch's files: never a site. A site is the first frame outside them, Ruby's own
      # library and the installed gems (library_paths).
      OWN_FILES = [__dir__ + "/", File.expand_path("../vm_watch.rb", __dir__)].freeze

      MODULE_NAME = Module.instance_method(:name)

      # One watched call in progress. start: the counters at the call; children: what nested
      # watched calls already accounted for.
      Frame = Struct.new(:method_id, :receiver, :owner, :start, :children)

      # The exception that stopped the tracing, if one did.
      attr_reader :error

      def initialize(thread = Thread.current)
        @thread = thread
        @frames = []
        @untraced_depth = 0
        @sites = {}
        @library = library_paths
        @trace = TracePoint.new(:c_call, :call, :c_return, :return, :class) { |tp| on_event(tp) }
      end

      def start
        @last = Counters.read
        @trace.enable(target_thread: @thread)
        self
      end

      # Stops tracing; the Sites found, in the order first seen.
      def stop
        @trace.disable
        @sites.values
      end

      private

      # An exception raised here would surface in the traced code, the app's request: the
      # tracing stops instead, and what follows counts as not attributed.
      def on_event(tp)
        case tp.event
        when :c_call, :call then enter(tp) if WATCHED[tp.method_id]
        when :c_return, :return then leave(tp) if WATCHED[tp.method_id]
        else enter_class_body(tp)
        end
      rescue => e
        @error = e
        @trace.disable
      end

      def enter(tp)
        if @frames.size >= MAX_DEPTH
          @untraced_depth += 1
          return
        end
        @last = Counters.read
        @frames << Frame.new(tp.method_id, tp.self, tp.defined_class, @last, Array.new(@last.size, 0))
      end

      def leave(tp)
        if @untraced_depth.positive?
          @untraced_depth -= 1
          return
        end
        # A frame left without its return (a throw across it) is dropped with the ones above it.
        index = @frames.rindex { |frame| frame.method_id == tp.method_id }
        return unless index

        frame = @frames[index]
        @frames.slice!(index..)
        @last = Counters.read
        total = Counters.difference(@last, frame.start)
        charge(Counters.difference(total, frame.children), operation(frame), total)
      end

      def enter_class_body(tp)
        now = Counters.read
        gap = Counters.difference(now, @last)
        @last = now
        charge(gap, "#{(Class === tp.self) ? "class" : "module"} #{name_of(tp.self)}", gap)
      end

      # Records own as a site if it is not all zero, and tells the enclosing frame that total is
      # accounted for.
      def charge(own, operation, total)
        parent = @frames.last
        parent.children = Counters.sum(parent.children, total) if parent
        record(own, operation) if own.any?(&:positive?)
      end

      def record(own, operation)
        frames = caller_locations(1).reject { |location| own_file?(location.path) }
        app = frames.find { |location| !library?(location.path) } || frames.first
        location = app ? "#{app.path}:#{app.lineno}" : "?"
        direct = frames.first ? "#{frames.first.path}:#{frames.first.lineno}" : location
        key = [location, direct, operation]
        deltas = Counters.delta(Array.new(own.size, 0), own)
        if (site = @sites[key])
          site.count += 1
          site.deltas = site.deltas.merge(deltas) { |_, a, b| a + b }
        elsif @sites.size < MAX_SITES
          @sites[key] = Site.new(location: location, called_from: direct, operation: operation, deltas: deltas, count: 1)
        end
      end

      def operation(frame)
        if Module === frame.receiver
          "#{name_of(frame.receiver)}.#{frame.method_id}"
        else
          "#{name_of(frame.owner)}##{frame.method_id}"
        end
      end

      # Module#name unbound and Module.===, so no method the app may override (.name, #is_a?) is
      # called from inside the hook.
      def name_of(mod)
        (Module === mod && MODULE_NAME.bind_call(mod)) || "(anonymous)"
      end

      def own_file?(path)
        OWN_FILES.any? { |own| path.start_with?(own) }
      end

      def library?(path)
        path.start_with?("<internal:") || @library.any? { |dir| path.start_with?(dir) }
      end

      def library_paths
        dirs = [RbConfig::CONFIG["rubylibdir"], RbConfig::CONFIG["rubyarchdir"]]
        dirs.concat(Gem.path) if defined?(Gem)
        dirs.compact.uniq.map { |dir| dir.end_with?("/") ? dir : "#{dir}/" }
      end
    end
  end
end
