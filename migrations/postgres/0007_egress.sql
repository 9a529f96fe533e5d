-- 0007_egress: each App's egress policy (issue 15), the `network` object of the API in its normal
-- form: {"egress":"public"} (the host-wide rule), {"egress":"none"}, or
-- {"egress":"allowlist","allow":["203.0.113.0/24","api.example.com:443","*.example.org"]}.
-- Existing Apps keep the host-wide rule.
ALTER TABLE apps ADD COLUMN network TEXT NOT NULL DEFAULT '{"egress":"public"}';
