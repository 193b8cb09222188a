"""τ²-bench retail: a tool-using customer-service domain (database, tools, reward, tasks).

The data (the shop's database, 114 tasks, their train/test split and the agent policy) is read
from the folder a config's `data_dir` names, else $TAU2_RETAIL_DATA_DIR (`paths.py`); it is
never copied into the repository.
"""
