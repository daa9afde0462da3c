import CircleWire
import Hummingbird

/// `GET` and `PUT /v1/circles/{name}/retention` (docs/API.md, "Retention"): what a circle keeps.
extension CircleRoutes {
    func addRetention<Context: CircleRequestContext>(to router: some RouterMethods<Context>) {
        let store = self.services.store
        let path = RouterPath(HTTPAPI.Path.Pattern.retention.template)
        router.get(path) { _, context in
            let principal = try context.requirePrincipal(.read)
            let info = try await self.visibleCircle(context, principal: principal)
            return Response.json(.ok, Self.retentionBody(try await store.retentionPolicy(of: info.name)))
        }
        router.put(path) { request, context in
            let principal = try context.requirePrincipal(.manage)
            let info = try await self.visibleCircle(context, principal: principal, managing: true)
            // The owner, an admin, or a key with `manage`: as for its members.
            guard try await self.managesMembers(of: info, principal: principal) else {
                throw APIError(.forbidden, .forbidden, "only the owner (\(info.owner)) or an admin sets a circle's retention")
            }
            var request = request
            let body = try await request.jsonBody()
            let setting = try body.decodeJSON(HTTPAPI.RetentionSetting.self, send: #"{"days": 30 | null, "keep": 10000 | null}"#)
            var policy: RetentionPolicy?
            if setting.days != nil || setting.keep != nil {
                let asked = RetentionPolicy(maxAgeDays: setting.days, keepNewest: setting.keep)
                if let problem = asked.problem { throw APIError(.badRequest, .badRequest, problem) }
                policy = asked
            }
            try await store.setRetentionPolicy(policy, of: info.name)
            return Response.json(.ok, Self.retentionBody(policy))
        }
    }

    static func retentionBody(_ policy: RetentionPolicy?) -> HTTPAPI.RetentionSetting {
        HTTPAPI.RetentionSetting(days: policy?.maxAgeDays, keep: policy?.keepNewest)
    }
}
