extension HTTPAPI {
    /// A route's path with named `{parameter}` segments, such as `/v1/circles/{name}/messages`:
    /// declared once, the server's router registers it as it is and clients fill it in with
    /// ``path(_:)``.
    public struct PathPattern: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
        /// The pattern as the router takes it: segments, some of them `{name}`.
        public let template: String

        public init(_ template: String) {
            self.template = template
        }

        public init(stringLiteral value: String) {
            self.init(value)
        }

        public var description: String { self.template }

        /// The names of the `{…}` segments, in order.
        public var parameters: [String] {
            self.template.split(separator: "/").compactMap { segment in
                segment.hasPrefix("{") && segment.hasSuffix("}") ? String(segment.dropFirst().dropLast()) : nil
            }
        }

        /// The path with the `{…}` segments replaced by `values` in order, each percent-encoded
        /// as one segment. A missing value leaves its segment empty (a programming error the
        /// pattern tests catch).
        public func path(_ values: String...) -> String {
            var remaining = values[...]
            let segments = self.template.split(separator: "/", omittingEmptySubsequences: false).map { segment -> String in
                guard segment.hasPrefix("{"), segment.hasSuffix("}") else { return String(segment) }
                return remaining.popFirst().map(Path.escaped) ?? ""
            }
            return segments.joined(separator: "/")
        }

        /// This pattern followed by more segments.
        public func appending(_ suffix: String) -> PathPattern {
            PathPattern(self.template + suffix)
        }
    }
}

extension HTTPAPI.Path {
    /// The chat page (`/`), its files (`/assets/{file}`) and the favicon.
    public static let page = "/"
    public static let favicon = "/favicon.ico"

    /// The routes with parameters, as the server's router declares them; the functions of
    /// ``HTTPAPI/Path`` fill them in for clients.
    public enum Pattern {
        public static let asset: HTTPAPI.PathPattern = "/assets/{file}"
        public static let circle: HTTPAPI.PathPattern = "/v1/circles/{name}"
        public static let messages = circle.appending("/messages")
        public static let message = messages.appending("/{seq}")
        public static let reaction = message.appending("/reactions/{emoji}")
        public static let notify = circle.appending("/notify")
        public static let retention = circle.appending("/retention")
        public static let members = circle.appending("/members")
        public static let member = members.appending("/{user}")
        public static let systemEntries = circle.appending("/system-entries")
        public static let readOnly = circle.appending("/read-only")
        public static let publishHook = circle.appending("/publish-hook")
        public static let mediaItem: HTTPAPI.PathPattern = "/v1/media/{id}"
        public static let upload: HTTPAPI.PathPattern = "/v1/media/uploads/{upload}"
        public static let authSession: HTTPAPI.PathPattern = "/v1/auth/sessions/{id}"
        public static let passkey: HTTPAPI.PathPattern = "/v1/auth/passkeys/{id}"
        public static let adminUser: HTTPAPI.PathPattern = "/v1/admin/users/{name}"
        public static let adminUserErase = adminUser.appending("/erase")
        public static let adminUserDisconnect = adminUser.appending("/disconnect")
        public static let adminInvite: HTTPAPI.PathPattern = "/v1/admin/invites/{id}"
        public static let adminAPIKey: HTTPAPI.PathPattern = "/v1/admin/api-keys/{id}"
        public static let adminWebhook: HTTPAPI.PathPattern = "/v1/admin/webhooks/{id}"
        public static let adminWebhookRotate = adminWebhook.appending("/rotate")
        public static let adminWebhookDeliveries = adminWebhook.appending("/deliveries")
        public static let adminWebhookRetry = adminWebhookDeliveries.appending("/{delivery}/retry")
        public static let apnsDevice: HTTPAPI.PathPattern = "/v1/push/apns/{token}"

        /// Every pattern above.
        public static let all: [HTTPAPI.PathPattern] = [
            asset, circle, messages, message, reaction, notify, retention, members, member, systemEntries, readOnly, publishHook,
            mediaItem, upload, authSession, passkey, adminUser, adminUserErase, adminUserDisconnect, adminInvite, adminAPIKey,
            adminWebhook, adminWebhookRotate, adminWebhookDeliveries, adminWebhookRetry, apnsDevice,
        ]
    }

    /// Every path without parameters that the server answers.
    public static let all: [String] = [
        page, favicon, health, metrics, config, developmentToken, webSocket, echo, circles, directMessages, media, uploads,
        search, pushKey, pushSubscriptions, apnsDevices, adminAudit, adminAPIKeys, adminWebhooks,
        authState, authSetup, authInvite, authSignUp, authSignIn, authSignOut, authSignOutEverywhere, authSessions, authTokens,
        authPassword, profile, users, adminUsers, adminInvites, adminBots, deviceStart, deviceApprove, deviceToken,
        passkeys, passkeyRegisterOptions, passkeyRegister, passkeySignInOptions, passkeySignIn,
    ]
}
