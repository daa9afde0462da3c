import Foundation

extension HTTPAPI.Path {
    /// `GET`: the server's VAPID public key (docs/API.md, "Push notifications").
    public static let pushKey = "/v1/push/key"
    /// `POST` a browser's `PushSubscription` JSON, `GET` yours, `DELETE ?endpoint=` one.
    public static let pushSubscriptions = "/v1/push/subscriptions"
    /// `POST` an Apple device's APNs token (``HTTPAPI/APNsRegistration``); `DELETE
    /// /v1/push/apns/{token}` removes it (``Pattern/apnsDevice``).
    public static let apnsDevices = "/v1/push/apns"

    /// `DELETE`: one of your APNs device tokens.
    public static func apnsDevice(_ token: String) -> String { Pattern.apnsDevice.path(token) }
}

extension HTTPAPI {
    /// `POST /v1/push/apns`: an Apple device's token, as the app got it from
    /// `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`, in hex.
    public struct APNsRegistration: Codable, Sendable, Hashable {
        /// 64 to 200 hex digits.
        public var token: String
        /// `production` (App Store and TestFlight builds, the default) or `development` (Xcode builds: Apple's sandbox).
        public var environment: String?
        public init(token: String, environment: String? = nil) {
            self.token = token
            self.environment = environment
        }
    }
}

extension HTTPAPI {
    /// `GET /v1/push/key`.
    public struct PushKey: Codable, Sendable, Hashable {
        /// Whether this server sends pushes (its operator set a contact).
        public var enabled: Bool
        /// The VAPID public key, an uncompressed P-256 point in base64url: the page's
        /// `applicationServerKey`. Absent when push is off.
        public var publicKey: String?
        public init(enabled: Bool, publicKey: String?) {
            self.enabled = enabled
            self.publicKey = publicKey
        }
    }

    /// One of your push subscriptions as the server lists it (its keys are not echoed).
    public struct PushSubscriptionInfo: Codable, Sendable, Hashable {
        public var endpoint: String
        public var createdAt: Int64
        public init(endpoint: String, createdAt: Int64) {
            self.endpoint = endpoint
            self.createdAt = createdAt
        }
    }

    /// `GET /v1/push/subscriptions`: yours, oldest first.
    public struct PushSubscriptionList: Codable, Sendable, Hashable {
        public var subscriptions: [PushSubscriptionInfo]
        public init(subscriptions: [PushSubscriptionInfo]) { self.subscriptions = subscriptions }
    }
}
