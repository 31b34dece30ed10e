package keys

// AuditPrefix is the prefix of namespace ns's audit trail (the records of
// force-unlocks and release requests), "/<ns>/audit/v1/". It lies outside
// NamespacePrefix, so that the contenders' grant on the namespace does not
// cover it. Older versions wrote the trail inside the namespace, under
// KindPrefix(ns, Audit).
func AuditPrefix(ns string) string { return "/" + ns + "/audit/v1/" }

// RequestAuditPrefix is the part of namespace ns's audit trail that holds
// the records of release requests, "/<ns>/audit/v1/request/", so that the
// requesters' role can write there and nowhere else in the trail. Older
// versions wrote request records directly under AuditPrefix.
func RequestAuditPrefix(ns string) string { return AuditPrefix(ns) + "request/" }
