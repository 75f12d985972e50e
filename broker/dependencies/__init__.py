"""Job dependencies (`depends_on`, the `Depends` attribute): the pure graph
decisions (`graph`), registered at submission and resolved by the leader
(`resolver`).
"""
