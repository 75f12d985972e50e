"""The glide-in: a startd started inside another batch system's job, with a
lifetime, cgroup readings and a clean exit (`fetchwork glidein`).
"""
