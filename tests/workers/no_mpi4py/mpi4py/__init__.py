# Shadows the real mpi4py in test_launchers.py, to test the launch path of a machine without it.
raise ImportError("mpi4py hidden for this test")
