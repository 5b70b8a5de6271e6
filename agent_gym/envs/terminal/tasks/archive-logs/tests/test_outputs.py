
import tarfile


def test_archive():
    with tarfile.open("/app/logs.tar.gz", "r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert names == ["logs/app.log", "logs/db.log"]
