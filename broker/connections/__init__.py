"""How clients reach a pool's Redis: the embedded server, URLs, TLS and users,
Sentinel and Cluster, the Redis ACL roles and the submission's replica wait.
"""
