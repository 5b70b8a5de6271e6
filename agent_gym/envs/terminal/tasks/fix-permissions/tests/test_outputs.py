
import os
import stat


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)
def test_modes():
    assert mode("/app/bin/run.sh") & stat.S_IXUSR
    assert mode("/app/secret.key") == 0o600
    assert mode("/app/public") == 0o755
