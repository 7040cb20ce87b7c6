# frozen_string_literal: true

# The seed's shape, made up the same way every time: 10 projects, 40 people, STRATA_DEMO_BUGS
# bugs (default 300, four pages of 75), each with 1 to 5 tags. insert_all runs no callbacks (the
# database tasks have no cache to invalidate; see the Rakefile).
random = Random.new(25)
words = %w[crash hang login export import screen font network proxy sound printer update upgrade
  timeout locale keyboard mouse theme cache search index sync backup restore memory disk battery
  wifi bluetooth].freeze
tag_names = %w[regression security ui performance i18n accessibility packaging documentation
  trivial needs-testing bitesize upstream oem-priority verification-needed patch].freeze
now = Time.current

Project.insert_all!(Array.new(10) { |i| {name: "project-#{i + 1}"} })
Person.insert_all!(Array.new(40) { |i| {name: "Person #{i + 1}", email: "person#{i + 1}@example.com"} })
project_ids = Project.ids
person_ids = Person.ids

bugs = Array.new(Integer(ENV.fetch("STRATA_DEMO_BUGS", 300))) do |i|
  subject = words.sample(3, random: random)
  {
    project_id: project_ids.sample(random: random), owner_id: person_ids.sample(random: random),
    title: "#{subject[0].capitalize} #{subject[1]} fails after #{subject[2]}",
    description: Array.new(4) { "Steps: #{words.sample(6, random: random).join(" ")}; expected #{words.sample(random: random)}." }.join("\n"),
    status: Bug::STATUSES.sample(random: random), importance: Bug::IMPORTANCES.sample(random: random),
    created_at: now - (300 - i) * 3600, updated_at: now
  }
end
Bug.insert_all!(bugs)

tags = Bug.ids.flat_map do |bug_id|
  tag_names.sample(random.rand(1..5), random: random).map { |name| {bug_id: bug_id, name: name} }
end
BugTag.insert_all!(tags)
