#!/bin/bash
grep -oE '[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]+' /app/contacts.txt | sort -u > /app/emails.txt
