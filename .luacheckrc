std = 'luajit'
max_line_length = 120
files['spec'] = {std = '+busted'}
exclude_files = {'build', 'build-asan'}
