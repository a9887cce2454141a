"""Security: SASL authentication against SCRAM credentials kept in the cluster metadata, the ACL authorizer,
and the listeners' security protocols (docs/SECURITY.md)."""
