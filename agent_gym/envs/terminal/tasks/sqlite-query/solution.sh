#!/bin/bash
python3 -c "import sqlite3; c=sqlite3.connect('/app/shop.db'); print(c.execute('select name from items order by qty*price desc limit 1').fetchone()[0])" > /app/top_item.txt
