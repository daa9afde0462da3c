import CircleWire
import Foundation
import Hummingbird

/// Web Push subscriptions (docs/API.md, "Push notifications"): each signed-in user registers
/// their devices' subscriptions and removes them; the server's VAPID public key for the page.
struct PushRoutes: Sendable {
    let services: ServerServices

    var store: any CircleStore { self.services.store }
    var settings: PushSettings { self.services.configuration.push }

    /// How the subscribe route checks endpoints: the server's outbound policy.
    var policy: PushSubscription.Policy {
        PushSubscription.Policy(
            allowsHTTP: self.settings.allowHTTP,
            allowsPrivate: self.services.configuration.allowPrivateOutbound || self.settings.allowPrivateAddresses
        )
    }

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
        router.get(RouterPath(HTTPAPI.Path.pushKey)) { _, context in
            _ = try context.requireUser()
            guard self.settings.contact != nil else { return Response.json(.ok, HTTPAPI.PushKey(enabled: false, publicKey: nil)) }
            let key = try await self.services.push.keys.key()
            return Response.json(.ok, HTTPAPI.PushKey(enabled: true, publicKey: key.publicKey))
        }
        router.post(RouterPath(HTTPAPI.Path.pushSubscriptions)) { request, context in
            let principal = try context.requireUser()
            try self.requireEnabled()
            var request = request
            let body = try await request.jsonBody()
            guard body.readableBytes <= PushSubscription.maximumBodyBytes else {
                throw APIError(.contentTooLarge, .tooLarge, "a push subscription has at most \(PushSubscription.maximumBodyBytes) bytes")
            }
            switch PushSubscription.parse(Array(buffer: body), user: principal.name, policy: self.policy, now: Identity.now) {
            case .failure(let problem):
                throw APIError(.badRequest, .badRequest, problem.description)
            case .success(let subscription):
                try await self.store.putPushSubscription(subscription, maxPerUser: PushSubscription.maximumPerUser)
                return Response.json(.created, HTTPAPI.PushSubscriptionInfo(endpoint: subscription.endpoint, createdAt: subscription.createdAt))
            }
        }
        router.get(RouterPath(HTTPAPI.Path.pushSubscriptions)) { _, context in
            let principal = try context.requireUser()
            let subscriptions = try await self.store.pushSubscriptions(of: principal.name)
            return Response.json(.ok, HTTPAPI.PushSubscriptionList(subscriptions: subscriptions.map { .init(endpoint: $0.endpoint, createdAt: $0.createdAt) }))
        }
        router.delete(RouterPath(HTTPAPI.Path.pushSubscriptions)) { request, context in
            let principal = try context.requireUser()
            guard let endpoint = request.uri.queryParameters.get("endpoint"), !endpoint.isEmpty,
                endpoint.utf8.count <= PushSubscription.maximumEndpointBytes
            else {
                throw APIError(.badRequest, .badRequest, "give the subscription's endpoint: DELETE \(HTTPAPI.Path.pushSubscriptions)?endpoint=…")
            }
            guard try await self.store.deletePushSubscription(endpoint: endpoint, of: principal.name) else {
                throw APIError(.notFound, .notFound, "you have no push subscription with that endpoint")
            }
            return Response(status: .noContent)
        }
        router.post(RouterPath(HTTPAPI.Path.apnsDevices)) { request, context in
            let principal = try context.requireUser()
            try self.requireAPNs()
            var request = request
            let body = try await request.jsonBody()
            guard body.readableBytes <= APNsDevice.maximumBodyBytes else {
                throw APIError(.contentTooLarge, .tooLarge, "a device registration has at most \(APNsDevice.maximumBodyBytes) bytes")
            }
            switch APNsDevice.parse(Array(buffer: body)) {
            case .failure(let problem):
                throw APIError(.badRequest, .badRequest, problem.description)
            case .success(let device):
                let subscription = PushSubscription(user: principal.name, endpoint: device.endpoint, p256dh: "", auth: "", createdAt: Identity.now)
                try await self.store.putPushSubscription(subscription, maxPerUser: PushSubscription.maximumPerUser)
                return Response.json(.created, HTTPAPI.PushSubscriptionInfo(endpoint: subscription.endpoint, createdAt: subscription.createdAt))
            }
        }
        router.delete(RouterPath(HTTPAPI.Path.Pattern.apnsDevice.template)) { _, context in
            let principal = try context.requireUser()
            guard let token = APNsDevice.token(try context.pathParameter("token")) else {
                throw APIError(.badRequest, .badRequest, "a device token is \(APNsDevice.tokenHexLength.lowerBound) to \(APNsDevice.tokenHexLength.upperBound) hex digits")
            }
            var removed = false
            for environment in APNsDevice.Environment.allCases {
                if try await self.store.deletePushSubscription(endpoint: APNsDevice(token: token, environment: environment).endpoint, of: principal.name) {
                    removed = true
                }
            }
            guard removed else { throw APIError(.notFound, .notFound, "you have no APNs device with that token") }
            return Response(status: .noContent)
        }
    }

    private func requireAPNs() throws {
        guard self.settings.apns != nil else {
            throw APIError(.notFound, .notFound, "this server sends no APNs notifications (its operator has set no APNs key)")
        }
    }

    private func requireEnabled() throws {
        guard self.settings.contact != nil else {
            throw APIError(.notFound, .notFound, "this server sends no push notifications (its operator has set no push contact)")
        }
    }
}
