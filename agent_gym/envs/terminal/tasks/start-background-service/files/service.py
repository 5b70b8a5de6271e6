import os
import time

open('/app/service.pid', 'w').write(str(os.getpid()))
while True:
    open('/app/heartbeat.txt', 'w').write(f'beat {time.time():.0f}')
    time.sleep(0.2)
