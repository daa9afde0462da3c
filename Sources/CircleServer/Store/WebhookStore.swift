/// Webhook subscriptions and their deliveries (docs/API.md, "Webhooks"): the outbox that commits
/// fill (``CommitPlan/webhookDeliveries(_:now:)``, in the entries' transaction) and the
/// ``WebhookDispatcher`` of each node empties.
public protocol WebhookStore: Sendable {
    func createWebhook(_ webhook: Webhook) async throws
    /// Every subscription, oldest first.
    func webhooks() async throws -> [Webhook]
    func webhook(id: String) async throws -> Webhook?
    /// Writes a subscription's status, reason and secrets; `false` when there is no such one.
    func updateWebhook(_ webhook: Webhook) async throws -> Bool
    /// Removes a subscription and its deliveries; `false` when there is no such one.
    func deleteWebhook(id: String) async throws -> Bool

    /// A subscription's deliveries, newest first.
    func deliveries(of webhook: String, limit: Int) async throws -> [WebhookDelivery]
    /// Counts of a subscription's deliveries by status.
    func deliveryCounts(of webhook: String) async throws -> [WebhookDeliveryStatus: Int]

    /// Leases deliveries that are due to `node` until `now + lease`: of each active subscription's
    /// queue per circle, only the first pending delivery (so each queue goes in order), at most
    /// `perWebhook` of one subscription and `limit` in all, none of the subscriptions in
    /// `excluding` (those the node is still sending to). A delivery leased by another node is
    /// not taken until its lease ends (a node that died mid-delivery leaves it to another).
    func claimDeliveries(node: String, now: Int64, lease: Int64, limit: Int, perWebhook: Int, excluding: [String]) async throws -> [WebhookDelivery]
    /// Records an attempt of a delivery leased to `node`; `false` when its lease went to another
    /// node meanwhile (nothing is written then). ``DeliveryResult/failed(status:error:reason:)``
    /// also disables the subscription.
    func finishDelivery(_ id: String, node: String, result: DeliveryResult, at now: Int64) async throws -> Bool
    /// Makes a failed delivery pending again, due at `now`; `false` when there is no failed one with that id.
    func retryDelivery(_ id: String, of webhook: String, now: Int64) async throws -> Bool
    /// Deletes deliveries delivered before `time`; returns how many.
    func pruneDeliveries(deliveredBefore time: Int64) async throws -> Int
}
