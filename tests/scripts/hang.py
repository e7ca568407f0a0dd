import time
import torch
time.sleep(600)
