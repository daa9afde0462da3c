import CircleWire

/// The pushes a commit queues (docs/API.md, "Push notifications"), decided here for both stores
/// and written in the entries' transaction (the push outbox, ``PushStore``):
///
/// - a person a post (or an edit that adds them) mentions, `@everyone` included, is pushed to
///   unless their level in the circle is `none` (`mentions` and `all` both want mentions);
/// - a post in a direct message is pushed to each other member whose level there is `all` (the
///   default for DMs); one who is mentioned too gets one push, of kind `mention`;
/// - a post in a circle is pushed to each person whose level there is `all` (a member, for a
///   private circle: the store reads them, ``circlesForEveryPost()``), as kind `post`, unless a
///   mention of them in it was pushed;
/// - never to the author; only to people with at least one push subscription (the store reads
///   which of ``pushCandidates()`` have one into ``Known/pushSubscribers``).
///
/// Bounded: the candidates of one entry are its mentions (`@everyone` names at most
/// ``StoreLimits/maxEveryoneMentions`` members), a DM's members (at most 9), and the people who
/// chose `all` in its circle and have a push subscription (as many as want every post).
extension CommitPlan {
    /// The circles (not direct messages) the batch posted in: the store reads who chose `all`
    /// in each, and may be pushed to there, for ``pushCandidates(everyPost:)``.
    func circlesForEveryPost() -> [(circle: String, isPrivate: Bool)] {
        var seen = Set<BinaryText>()
        return self.inserts.compactMap { entry in
            let name = BinaryText(entry.circle)
            guard entry.isPost, !self.restored.contains(EntryKey(entry)), self.directMembers[name] == nil, seen.insert(name).inserted else { return nil }
            return (entry.circle, self.privateCircles.contains(name))
        }
    }

    /// The people the batch's pushes could go to, once each per circle: the store looks up which
    /// of them have a push subscription, and their level there. `everyPost`: per circle of
    /// ``circlesForEveryPost()``, who chose `all` there (and may read it).
    func pushCandidates(everyPost: [String: [String]] = [:]) -> [(circle: String, user: String)] {
        var seen = Set<MemberKey>()
        var candidates: [(circle: String, user: String)] = []
        func add(_ circle: String, _ user: String) {
            if seen.insert(MemberKey(circle: circle, user: user)).inserted { candidates.append((circle, user)) }
        }
        for mention in self.mentionWrites where !self.restored.contains(EntryKey(circle: mention.circle, seq: mention.seq)) {
            add(mention.circle, mention.user)
        }
        for entry in self.inserts where entry.isPost && !self.restored.contains(EntryKey(entry)) {
            for member in self.directMembers[BinaryText(entry.circle)] ?? everyPost[entry.circle] ?? [] where BinaryText(member) != BinaryText(entry.author) {
                add(entry.circle, member)
            }
        }
        return candidates
    }

    /// What the store read of a push candidate: the level they chose in the circle (`nil`: the
    /// default) and their subscriptions' endpoints.
    struct PushTarget: Sendable, Hashable {
        var level: NotificationLevel?
        var endpoints: [String]
    }

    /// The pushes to queue (one per subscription), given ``Known/pushSubscribers``: one per person per post (a mention
    /// wins over a DM's post), in the order the entries were committed.
    func pushWrites(subscribers: [MemberKey: PushTarget], everyPost: [String: [String]] = [:]) -> [PushWrite] {
        guard !subscribers.isEmpty else { return [] }
        var writes: [PushWrite] = []
        var queued = Set<PushKey>()
        struct PushKey: Hashable {
            var member: MemberKey
            var seq: Int64
        }
        func level(_ key: MemberKey, direct: Bool) -> NotificationLevel? {
            guard let target = subscribers[key], !target.endpoints.isEmpty else { return nil }  // no subscription
            return target.level ?? NotificationLevel.defaultLevel(direct: direct)
        }
        func queue(_ key: MemberKey, seq: Int64, kind: PushKind) {
            for endpoint in subscribers[key]?.endpoints ?? [] {
                writes.append(PushWrite(endpoint: endpoint, user: key.user.string, circle: key.circle.string, seq: seq, kind: kind))
            }
        }
        for mention in self.mentionWrites where !self.restored.contains(EntryKey(circle: mention.circle, seq: mention.seq)) {
            let key = MemberKey(circle: mention.circle, user: mention.user)
            let direct = self.directMembers[key.circle] != nil
            guard let wanted = level(key, direct: direct), wanted != .none,
                queued.insert(PushKey(member: key, seq: mention.post)).inserted
            else { continue }
            queue(key, seq: mention.post, kind: .mention)
        }
        for entry in self.inserts where entry.isPost && !self.restored.contains(EntryKey(entry)) {
            let direct = self.directMembers[BinaryText(entry.circle)]
            for member in direct ?? everyPost[entry.circle] ?? [] where BinaryText(member) != BinaryText(entry.author) {
                let key = MemberKey(circle: entry.circle, user: member)
                guard level(key, direct: direct != nil) == .all, queued.insert(PushKey(member: key, seq: entry.seq)).inserted else { continue }
                queue(key, seq: entry.seq, kind: direct != nil ? .dm : .post)
            }
        }
        return writes
    }
}
